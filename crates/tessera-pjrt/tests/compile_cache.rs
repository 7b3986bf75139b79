//! The process's persistent compile cache (`set_compile_cache`, `Client::compile_cached`) and
//! its counts: a second compile of the same module loads it, a change of the module, the
//! options or the client compiles again, and with the cache off every request compiles. One test
//! in its own process, so the process-wide counts are exact.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{
    Buffer, Client, CompileCache, CompileCounts, CompileOptions, HostArray, compile_counts,
    set_compile_cache,
};

const ADD: &str = r#"
module @add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> tensor<2x2xf32> {
    %0 = stablehlo.add %a, %b : tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}
"#;

fn counts_since(start: CompileCounts) -> (u64, u64) {
    let now = compile_counts();
    (now.compiled - start.compiled, now.loaded - start.loaded)
}

#[test]
fn compiles_go_through_the_process_cache_and_are_counted() {
    let client = Client::cpu(4).expect("the PJRT CPU plugin (run `cargo xtask setup`)");
    let dir = std::env::temp_dir().join(format!("tessera-process-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    set_compile_cache(Some(CompileCache::new(&dir)));
    assert_eq!(tessera_pjrt::compile_cache().unwrap().unwrap().dir(), dir);

    let start = compile_counts();
    let options = CompileOptions::spmd(&[1]);
    client.compile_cached(ADD.as_bytes(), &options).unwrap();
    assert_eq!(counts_since(start), (1, 0));
    let loaded = client.compile_cached(ADD.as_bytes(), &options).unwrap();
    assert_eq!(counts_since(start), (1, 1), "the second request loads");
    let x = Buffer::from_host_to(
        &client,
        &HostArray::from_slice(&[2, 2], &[1.5f32; 4]).unwrap(),
        1,
    )
    .unwrap();
    let out = loaded.execute(&[vec![&x, &x]]).unwrap();
    assert_eq!(
        out[0][0].to_host().unwrap().to_typed::<f32>().unwrap(),
        [3.0; 4]
    );

    // Each part of the key changes it: the module, the options, the client.
    let cache = CompileCache::new(&dir);
    let key = |client: &Client, module: &str, options: &CompileOptions| {
        cache.key(client, module.as_bytes(), options).unwrap()
    };
    let base = key(&client, ADD, &options);
    assert_eq!(base, key(&client, ADD, &options), "the key is a function");
    assert_ne!(base, key(&client, &ADD.replace("@add", "@plus"), &options));
    assert_ne!(base, key(&client, ADD, &options.clone().with_shardy(true)));
    assert_ne!(base, key(&client, ADD, &CompileOptions::spmd(&[2])));
    let other = Client::cpu(2).unwrap();
    assert_ne!(base, key(&other, ADD, &options), "another client's options");
    let entries = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(entries, 1);
    assert!(dir.join(format!("{base}.xla")).is_file());

    set_compile_cache(None);
    assert!(tessera_pjrt::compile_cache().unwrap().is_none());
    client.compile_cached(ADD.as_bytes(), &options).unwrap();
    assert_eq!(
        counts_since(start),
        (2, 1),
        "with the cache off it compiles"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
