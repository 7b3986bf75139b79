//! A JAX program of 1560 variables (issue 34: JAX's 222nd variable is named `in`, the keyword
//! closing a jaxpr's body), as JAX 0.10.1 prints it (`tests/data/gen_many_vars_case.py`):
//! parsed, printed and parsed back, then run with its gradients on the interpreter and on the
//! PJRT CPU plugin against JAX's values.

/// Elementwise ops, `dot_general`, reductions and broadcasts, a `jit` printed in place, one
/// printed before the program (`let twice = ...`), `custom_jvp_call` (relu) and a `scan`.
#[test]
fn jax_program_of_1560_variables_matches_jax_on_both_backends() {
    let path = tessera_tests::repo_root().join("tests/data/many_vars_case.json");
    let client = tessera_pjrt::Client::cpu(1).unwrap_or_else(|e| panic!("no PJRT CPU client: {e}"));
    let interp = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera_ir::interp::eval_closed(p, x).map_err(|e| e.to_string())
    };
    let on_pjrt = |p: &tessera_ir::ClosedJaxpr, x: &[tessera_ir::Array]| {
        tessera::jit::run_on_device(&client, p, x, 0).map_err(|e| e.to_string())
    };
    for evaluate in [&interp as &tessera_ir::oracle::Evaluate<'_>, &on_pjrt] {
        // Each run parses the text, prints it, parses the print (which must give the same
        // program), evaluates, and checks the VJP against JAX's gradients.
        let report = tessera_ir::oracle::run_file_with_grads(&path, evaluate)
            .unwrap_or_else(|e| panic!("{e}"));
        tessera_tests::assert_all_pass(&report, 1);
    }
}
