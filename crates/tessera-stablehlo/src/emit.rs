//! An IR-agnostic StableHLO module emitter over `melior`: module attributes, functions whose
//! arguments and results carry shardings (GSPMD's `mhlo.sharding` or Shardy's `sdy.sharding`, as
//! the module's [`Partitioner`] says, with the `sdy.mesh` symbols they use) and donation
//! attributes, generic operations with parsed attributes, and regions. The lowering of Tessera's
//! IR (one rule per primitive) is written on top of this.

use std::rc::Rc;

use melior::Context;
use melior::dialect::func;
use melior::ir::attribute::{StringAttribute, TypeAttribute};
use melior::ir::operation::{OperationBuilder, OperationLike};
use melior::ir::r#type::{FunctionType, RankedTensorType};
use melior::ir::{
    Attribute, Block, BlockLike, Identifier, Location, Module, Region, RegionLike, ShapedTypeLike,
    Type, Value,
};
use tessera_sharding::NamedSharding;

use crate::context::LowerError;
use crate::sharding::{ModuleState, Partitioner};

/// One argument of an emitted function.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgSpec {
    /// The MLIR type text, e.g. `tensor<8x16xf32>`.
    pub ty: String,
    /// How the argument is laid out over the devices, if fixed; emitted as the module's
    /// partitioner reads it, for the rank of `ty`.
    pub sharding: Option<NamedSharding>,
    /// The result this argument's buffer is donated to (`tf.aliasing_output`).
    pub aliased_output: Option<usize>,
    /// Donated without a fixed output (`jax.buffer_donor`).
    pub buffer_donor: bool,
    /// The memory kind the argument is passed in (`mhlo.memory_kind`: `device`,
    /// `pinned_host`, ...), if annotated.
    pub memory_kind: Option<String>,
}

impl ArgSpec {
    /// An argument of type `ty` without sharding or donation.
    pub fn new(ty: impl Into<String>) -> Self {
        ArgSpec {
            ty: ty.into(),
            sharding: None,
            aliased_output: None,
            buffer_donor: false,
            memory_kind: None,
        }
    }

    /// The same argument passed in memory of kind `kind`, if one is given.
    pub fn with_memory_kind(mut self, kind: Option<String>) -> Self {
        self.memory_kind = kind;
        self
    }

    /// The same argument laid out by `sharding`.
    pub fn sharded(mut self, sharding: NamedSharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// The same argument laid out by `sharding`, if there is one.
    pub fn with_sharding(mut self, sharding: Option<NamedSharding>) -> Self {
        self.sharding = sharding;
        self
    }

    fn attributes(&self, state: &ModuleState, ty: Type<'_>) -> Result<String, LowerError> {
        let mut parts = Vec::new();
        if let Some(sharding) = &self.sharding {
            let (name, value) = state.value_attr(sharding, rank_of(ty, &self.ty)?)?;
            parts.push(format!("{name} = {value}"));
        }
        if let Some(output) = self.aliased_output {
            parts.push(format!("tf.aliasing_output = {output} : i32"));
        }
        if self.buffer_donor {
            parts.push("jax.buffer_donor = true".into());
        }
        if let Some(kind) = &self.memory_kind {
            parts.push(format!("mhlo.memory_kind = {}", quote(kind)));
        }
        Ok(format!("{{{}}}", parts.join(", ")))
    }
}

/// One result of an emitted function.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultSpec {
    /// The MLIR type text.
    pub ty: String,
    /// How the result is laid out over the devices, if fixed.
    pub sharding: Option<NamedSharding>,
    /// The memory kind the result is returned in (`mhlo.memory_kind`), if annotated.
    pub memory_kind: Option<String>,
}

impl ResultSpec {
    /// A result of type `ty` without sharding.
    pub fn new(ty: impl Into<String>) -> Self {
        ResultSpec {
            ty: ty.into(),
            sharding: None,
            memory_kind: None,
        }
    }

    /// The same result returned in memory of kind `kind`, if one is given.
    pub fn with_memory_kind(mut self, kind: Option<String>) -> Self {
        self.memory_kind = kind;
        self
    }

    /// The same result laid out by `sharding`.
    pub fn sharded(mut self, sharding: NamedSharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// The same result laid out by `sharding`, if there is one.
    pub fn with_sharding(mut self, sharding: Option<NamedSharding>) -> Self {
        self.sharding = sharding;
        self
    }

    fn attributes(&self, state: &ModuleState, ty: Type<'_>) -> Result<String, LowerError> {
        let mut parts = Vec::new();
        if let Some(sharding) = &self.sharding {
            let (name, value) = state.value_attr(sharding, rank_of(ty, &self.ty)?)?;
            parts.push(format!("{name} = {value}"));
        }
        if let Some(kind) = &self.memory_kind {
            parts.push(format!("mhlo.memory_kind = {}", quote(kind)));
        }
        Ok(format!("{{{}}}", parts.join(", ")))
    }
}

/// The rank of a ranked tensor type (`text` is its spelling, for the error).
fn rank_of(ty: Type<'_>, text: &str) -> Result<usize, LowerError> {
    RankedTensorType::try_from(ty)
        .map(|t| t.rank())
        .map_err(|_| {
            LowerError::Build(format!(
                "a sharded value must be a ranked tensor, not {text}"
            ))
        })
}

/// Quotes a string as an MLIR string attribute.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A finished module: verified text and MLIR bytecode.
#[derive(Debug, Clone)]
pub struct EmittedModule {
    /// The module as MLIR text (generic form for StableHLO and Shardy operations).
    pub text: String,
    /// The module as MLIR bytecode.
    pub bytecode: Vec<u8>,
    /// The partitioner its annotations are for: compile it with that one
    /// (`tessera_pjrt::CompileOptions::use_shardy` when Shardy).
    pub partitioner: Partitioner,
}

/// Builds one StableHLO module.
pub struct ModuleEmitter<'c> {
    context: &'c Context,
    module: Module<'c>,
    state: Rc<ModuleState>,
}

impl<'c> ModuleEmitter<'c> {
    /// A module named `name` for `num_partitions` SPMD partitions and `num_replicas` replicas,
    /// annotated for `partitioner`.
    pub fn new(
        context: &'c Context,
        name: &str,
        num_partitions: usize,
        num_replicas: usize,
        partitioner: Partitioner,
    ) -> Result<Self, LowerError> {
        let loc = Location::unknown(context);
        let region = Region::new();
        region.append_block(Block::new(&[]));
        let op = OperationBuilder::new("builtin.module", loc)
            .add_attributes(&[
                (
                    Identifier::new(context, "sym_name"),
                    StringAttribute::new(context, name).into(),
                ),
                (
                    Identifier::new(context, "mhlo.num_partitions"),
                    parse_attr(context, &format!("{num_partitions} : i32"))?,
                ),
                (
                    Identifier::new(context, "mhlo.num_replicas"),
                    parse_attr(context, &format!("{num_replicas} : i32"))?,
                ),
            ])
            .add_regions([region])
            .build()
            .map_err(|e| LowerError::Build(e.to_string()))?;
        let module =
            Module::from_operation(op).ok_or_else(|| LowerError::Build("not a module".into()))?;
        Ok(ModuleEmitter {
            context,
            module,
            state: Rc::new(ModuleState::new(partitioner, num_partitions)),
        })
    }

    /// The MLIR context.
    pub fn context(&self) -> &'c Context {
        self.context
    }

    /// The partitioner the module is annotated for.
    pub fn partitioner(&self) -> Partitioner {
        self.state.partitioner()
    }

    /// Lowers `dot_product_attention` in this module's functions as `attention` says.
    pub fn set_attention(&self, attention: crate::lower::AttentionLowering) {
        self.state.set_attention(attention);
    }

    /// Adds a function; `body` receives the entry block's arguments and returns the values to
    /// return. `public` functions are entry points; private ones are called with `func.call`.
    pub fn add_function<F>(
        &self,
        name: &str,
        args: &[ArgSpec],
        results: &[ResultSpec],
        public: bool,
        body: F,
    ) -> Result<(), LowerError>
    where
        F: for<'b> FnOnce(
            &Body<'c, 'b>,
            &[Value<'c, 'b>],
        ) -> Result<Vec<Value<'c, 'b>>, LowerError>,
    {
        let ctx = self.context;
        let loc = Location::unknown(ctx);
        let arg_types = args
            .iter()
            .map(|a| parse_type(ctx, &a.ty))
            .collect::<Result<Vec<_>, _>>()?;
        let result_types = results
            .iter()
            .map(|r| parse_type(ctx, &r.ty))
            .collect::<Result<Vec<_>, _>>()?;
        let state = &self.state;
        let block = build_block(ctx, state, &arg_types, "func.return", body)?;
        let region = Region::new();
        region.append_block(block);
        let mut attributes = vec![(
            Identifier::new(ctx, "sym_visibility"),
            StringAttribute::new(ctx, if public { "public" } else { "private" }).into(),
        )];
        let arg_attrs = args
            .iter()
            .zip(&arg_types)
            .map(|(a, &t)| a.attributes(state, t))
            .collect::<Result<Vec<_>, _>>()?;
        if arg_attrs.iter().any(|a| a != "{}") {
            let text = format!("[{}]", arg_attrs.join(", "));
            attributes.push((Identifier::new(ctx, "arg_attrs"), parse_attr(ctx, &text)?));
        }
        let res_attrs = results
            .iter()
            .zip(&result_types)
            .map(|(r, &t)| r.attributes(state, t))
            .collect::<Result<Vec<_>, _>>()?;
        if res_attrs.iter().any(|a| a != "{}") {
            let text = format!("[{}]", res_attrs.join(", "));
            attributes.push((Identifier::new(ctx, "res_attrs"), parse_attr(ctx, &text)?));
        }
        let function_type = FunctionType::new(ctx, &arg_types, &result_types);
        self.module.body().append_operation(func::func(
            ctx,
            StringAttribute::new(ctx, name),
            TypeAttribute::new(function_type.into()),
            region,
            &attributes,
            loc,
        ));
        Ok(())
    }

    /// Declares the Shardy meshes the module's shardings name (`sdy.mesh`, first in the module,
    /// as JAX emits them), verifies the module and returns its text and bytecode.
    pub fn finish(self) -> Result<EmittedModule, LowerError> {
        let ctx = self.context;
        for (position, (mesh, name)) in self.state.meshes().into_iter().enumerate() {
            let op = OperationBuilder::new("sdy.mesh", Location::unknown(ctx))
                .add_attributes(&[
                    (Identifier::new(ctx, "mesh"), parse_attr(ctx, &mesh)?),
                    (
                        Identifier::new(ctx, "sym_name"),
                        StringAttribute::new(ctx, &name).into(),
                    ),
                ])
                .build()
                .map_err(|e| LowerError::Build(format!("sdy.mesh: {e}")))?;
            self.module.body().insert_operation(position, op);
        }
        let text = crate::context::verify_and_print(&self.module)?;
        let bytecode = self.module.as_operation().write_bytecode();
        Ok(EmittedModule {
            text,
            bytecode,
            partitioner: self.state.partitioner(),
        })
    }
}

/// Appends operations to one block.
pub struct Body<'c, 'b> {
    context: &'c Context,
    block: &'b Block<'c>,
    state: Rc<ModuleState>,
}

impl<'c, 'b> Body<'c, 'b> {
    /// The MLIR context.
    pub fn context(&self) -> &'c Context {
        self.context
    }

    /// The partitioner the module is annotated for.
    pub fn partitioner(&self) -> Partitioner {
        self.state.partitioner()
    }

    /// What the module's bodies share (partitioner, Shardy meshes).
    pub(crate) fn state(&self) -> &ModuleState {
        &self.state
    }

    /// The SPMD partitions of the module this body belongs to.
    pub fn num_partitions(&self) -> usize {
        self.state.num_partitions()
    }

    /// How `dot_product_attention` is lowered in this module.
    pub fn attention(&self) -> crate::lower::AttentionLowering {
        self.state.attention()
    }

    /// Appends the generic operation `name` with `operands`, result types (MLIR type text) and
    /// attributes (name, MLIR attribute text), and returns its results.
    pub fn op(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        results: &[&str],
        attributes: &[(&str, String)],
    ) -> Result<Vec<Value<'c, 'b>>, LowerError> {
        self.op_with_regions(name, operands, results, attributes, Vec::new())
    }

    /// Like [`Body::op`], with regions (reduction bodies, all-reduce computations, ...).
    pub fn op_with_regions(
        &self,
        name: &str,
        operands: &[Value<'c, 'b>],
        results: &[&str],
        attributes: &[(&str, String)],
        regions: Vec<Region<'c>>,
    ) -> Result<Vec<Value<'c, 'b>>, LowerError> {
        let ctx = self.context;
        let result_types = results
            .iter()
            .map(|t| parse_type(ctx, t))
            .collect::<Result<Vec<_>, _>>()?;
        let attrs = attributes
            .iter()
            .map(|(key, value)| Ok((Identifier::new(ctx, key), parse_attr(ctx, value)?)))
            .collect::<Result<Vec<_>, LowerError>>()?;
        let op = OperationBuilder::new(name, Location::unknown(ctx))
            .add_operands(operands)
            .add_results(&result_types)
            .add_attributes(&attrs)
            .add_regions_vec(regions)
            .build()
            .map_err(|e| LowerError::Build(format!("{name}: {e}")))?;
        let op = self.block.append_operation(op);
        (0..op.result_count())
            .map(|i| {
                op.result(i)
                    .map(Into::into)
                    .map_err(|e| LowerError::Build(e.to_string()))
            })
            .collect()
    }

    /// A region with one block of arguments `args` whose body ends in `terminator` (e.g.
    /// `stablehlo.return`) returning what `body` returns.
    pub fn region<F>(
        &self,
        args: &[&str],
        terminator: &str,
        body: F,
    ) -> Result<Region<'c>, LowerError>
    where
        F: for<'r> FnOnce(
            &Body<'c, 'r>,
            &[Value<'c, 'r>],
        ) -> Result<Vec<Value<'c, 'r>>, LowerError>,
    {
        let ctx = self.context;
        let types = args
            .iter()
            .map(|t| parse_type(ctx, t))
            .collect::<Result<Vec<_>, _>>()?;
        let block = build_block(ctx, &self.state, &types, terminator, body)?;
        let region = Region::new();
        region.append_block(block);
        Ok(region)
    }
}

impl<'c, 'b> Body<'c, 'b> {
    /// A region with one block without arguments whose body (ended by `terminator` on what
    /// `body` returns) uses `captured`, values of this body (as `stablehlo.case` branches use
    /// the values of the enclosing block).
    pub fn region_capturing<F>(
        &self,
        captured: &[Value<'c, 'b>],
        terminator: &str,
        body: F,
    ) -> Result<Region<'c>, LowerError>
    where
        F: for<'r> FnOnce(
            &Body<'c, 'r>,
            &[Value<'c, 'r>],
        ) -> Result<Vec<Value<'c, 'r>>, LowerError>,
    {
        let context = self.context;
        let loc = Location::unknown(context);
        let block = Block::new(&[]);
        {
            let builder = Body {
                context,
                block: &block,
                state: Rc::clone(&self.state),
            };
            let outer: Vec<Value<'c, '_>> = captured.to_vec();
            let returned = body(&builder, &outer)?;
            let term = OperationBuilder::new(terminator, loc)
                .add_operands(&returned)
                .build()
                .map_err(|e| LowerError::Build(e.to_string()))?;
            block.append_operation(term);
        }
        let region = Region::new();
        region.append_block(block);
        Ok(region)
    }
}

/// A block with arguments of `types` whose operations `body` appends, ended by the operation
/// `terminator` (`func.return`, `stablehlo.return`) on the values `body` returns.
fn build_block<'c, F>(
    context: &'c Context,
    state: &Rc<ModuleState>,
    types: &[Type<'c>],
    terminator: &str,
    body: F,
) -> Result<Block<'c>, LowerError>
where
    F: for<'b> FnOnce(&Body<'c, 'b>, &[Value<'c, 'b>]) -> Result<Vec<Value<'c, 'b>>, LowerError>,
{
    let loc = Location::unknown(context);
    let block = Block::new(&types.iter().map(|&t| (t, loc)).collect::<Vec<_>>());
    {
        let builder = Body {
            context,
            block: &block,
            state: Rc::clone(state),
        };
        let params: Vec<Value<'c, '_>> = (0..block.argument_count())
            .map(|i| block.argument(i).map(Into::into))
            .collect::<Result<_, _>>()
            .map_err(|e| LowerError::Build(e.to_string()))?;
        let returned = body(&builder, &params)?;
        let term = OperationBuilder::new(terminator, loc)
            .add_operands(&returned)
            .build()
            .map_err(|e| LowerError::Build(e.to_string()))?;
        block.append_operation(term);
    }
    Ok(block)
}

/// Parses MLIR type text.
pub fn parse_type<'c>(context: &'c Context, text: &str) -> Result<Type<'c>, LowerError> {
    Type::parse(context, text).ok_or_else(|| LowerError::Parse {
        what: "type",
        text: text.into(),
    })
}

/// Parses MLIR attribute text.
pub fn parse_attr<'c>(context: &'c Context, text: &str) -> Result<Attribute<'c>, LowerError> {
    Attribute::parse(context, text).ok_or_else(|| LowerError::Parse {
        what: "attribute",
        text: text.into(),
    })
}

/// The MLIR spelling of a ranked tensor type: `tensor<2x3xf32>`, `tensor<f32>`.
pub fn tensor_type(dims: &[i64], element: &str) -> String {
    let mut text = String::from("tensor<");
    for d in dims {
        text.push_str(&format!("{d}x"));
    }
    text.push_str(element);
    text.push('>');
    text
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;
    use crate::new_context;

    fn check(module: EmittedModule, expected: Expect) {
        expected.assert_eq(&module.text);
    }

    fn sharding(spec: &str) -> NamedSharding {
        let mesh = tessera_sharding::Mesh::auto(&[("x", 4), ("y", 2)]).unwrap();
        NamedSharding::new(&mesh, tessera_sharding::PartitionSpec::parse(spec).unwrap()).unwrap()
    }

    /// The emitter's own smoke program: a sharded sum with a reduction region.
    pub(crate) fn sharded_sum(
        context: &Context,
        partitioner: Partitioner,
    ) -> Result<EmittedModule, LowerError> {
        let emitter = ModuleEmitter::new(context, "sharded_sum", 8, 1, partitioner)?;
        let args = [ArgSpec::new("tensor<8xf32>").sharded(sharding("P(('x', 'y'))"))];
        let results = [ResultSpec::new("tensor<f32>").sharded(sharding("P()"))];
        emitter.add_function("main", &args, &results, true, |body, params| {
            let zero = body.op(
                "stablehlo.constant",
                &[],
                &["tensor<f32>"],
                &[("value", "dense<0.0> : tensor<f32>".into())],
            )?;
            let add = body.region(
                &["tensor<f32>", "tensor<f32>"],
                "stablehlo.return",
                |inner, xs| inner.op("stablehlo.add", xs, &["tensor<f32>"], &[]),
            )?;
            body.op_with_regions(
                "stablehlo.reduce",
                &[params[0], zero[0]],
                &["tensor<f32>"],
                &[("dimensions", "array<i64: 0>".into())],
                vec![add],
            )
        })?;
        emitter.finish()
    }

    #[test]
    fn emits_a_sharded_reduction_module() {
        let context = new_context();
        check(
            sharded_sum(&context, Partitioner::Gspmd).unwrap(),
            expect![[r#"
                module @sharded_sum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
                  func.func public @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[8]}"}) -> (tensor<f32> {mhlo.sharding = "{replicated}"}) {
                    %0 = "stablehlo.constant"() {value = dense<0.000000e+00> : tensor<f32>} : () -> tensor<f32>
                    %1 = "stablehlo.reduce"(%arg0, %0) ({
                    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
                      %2 = "stablehlo.add"(%arg1, %arg2) : (tensor<f32>, tensor<f32>) -> tensor<f32>
                      "stablehlo.return"(%2) : (tensor<f32>) -> ()
                    }) {dimensions = array<i64: 0>} : (tensor<8xf32>, tensor<f32>) -> tensor<f32>
                    return %1 : tensor<f32>
                  }
                }
            "#]],
        );
    }

    /// Under Shardy the same program declares its mesh and annotates with `sdy.sharding`.
    #[test]
    fn emits_the_shardy_form_with_a_mesh_symbol() {
        let context = new_context();
        let module = sharded_sum(&context, Partitioner::Shardy).unwrap();
        assert_eq!(module.partitioner, Partitioner::Shardy);
        let head: Vec<&str> = module.text.lines().take(3).collect();
        expect![[r#"
            module @sharded_sum attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
              "sdy.mesh"() {mesh = #sdy.mesh<["x"=4, "y"=2]>, sym_name = "mesh"} : () -> ()
              func.func public @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}]>}) -> (tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {"#]]
        .assert_eq(&head.join("\n"));
        assert!(!module.text.contains("mhlo.sharding"), "{}", module.text);
    }

    #[test]
    fn donation_and_quoting_are_spelled_as_jax_does() {
        let context = new_context();
        let state = ModuleState::new(Partitioner::Gspmd, 2);
        let mut arg = ArgSpec::new("tensor<2xf32>").sharded(sharding("P('y')"));
        arg.aliased_output = Some(0);
        let ty = parse_type(&context, &arg.ty).unwrap();
        assert_eq!(
            arg.attributes(&state, ty).unwrap(),
            r#"{mhlo.sharding = "{devices=[2,4]<=[4,2]T(1,0) last_tile_dim_replicate}", tf.aliasing_output = 0 : i32}"#
        );
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(tensor_type(&[2, 3], "bf16"), "tensor<2x3xbf16>");
        assert_eq!(tensor_type(&[], "i1"), "tensor<i1>");
    }

    #[test]
    fn bad_attribute_text_is_an_error_not_a_panic() {
        let context = new_context();
        let emitter = ModuleEmitter::new(&context, "bad", 1, 1, Partitioner::Gspmd).unwrap();
        let err = emitter
            .add_function("main", &[], &[], true, |body, _| {
                body.op(
                    "stablehlo.constant",
                    &[],
                    &["tensor<f32>"],
                    &[("value", "dense<".into())],
                )
            })
            .unwrap_err();
        assert!(
            matches!(
                err,
                LowerError::Parse {
                    what: "attribute",
                    ..
                }
            ),
            "{err}"
        );
    }
}
