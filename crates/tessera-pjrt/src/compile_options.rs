//! XLA's `CompileOptionsProto`, the serialized options `PJRT_Client_Compile` takes, encoded with
//! `prost`. Only the fields Tessera sets are declared; field numbers follow XLA's
//! `compile_options.proto` and `xla_data.proto`.

use prost::Message;

/// `xla.DeviceAssignmentProto.ComputationDevice`: the device of each replica for one partition.
#[derive(Clone, PartialEq, Message)]
pub struct ComputationDevice {
    /// Device ids, one per replica.
    #[prost(int64, repeated, tag = "1")]
    pub replica_device_ids: Vec<i64>,
}

/// `xla.DeviceAssignmentProto`: which device runs each (replica, partition).
#[derive(Clone, PartialEq, Message)]
pub struct DeviceAssignmentProto {
    /// Number of replicas.
    #[prost(int32, tag = "1")]
    pub replica_count: i32,
    /// Number of partitions ("computations").
    #[prost(int32, tag = "2")]
    pub computation_count: i32,
    /// One entry per partition.
    #[prost(message, repeated, tag = "3")]
    pub computation_devices: Vec<ComputationDevice>,
}

/// `xla.ExecutableBuildOptionsProto` (the fields Tessera uses).
#[derive(Clone, PartialEq, Message)]
pub struct ExecutableBuildOptionsProto {
    /// The device to build for, or -1.
    #[prost(int64, tag = "1")]
    pub device_ordinal: i64,
    /// Number of replicas.
    #[prost(int64, tag = "4")]
    pub num_replicas: i64,
    /// Number of SPMD partitions.
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    /// Whether XLA partitions the program SPMD style.
    #[prost(bool, tag = "6")]
    pub use_spmd_partitioning: bool,
    /// A fixed device assignment.
    #[prost(message, optional, tag = "9")]
    pub device_assignment: Option<DeviceAssignmentProto>,
    /// Per parameter (or one value for all), whether XLA may choose its sharding
    /// (`allow_spmd_sharding_propagation_to_parameters = 18`).
    #[prost(bool, repeated, tag = "18")]
    pub allow_spmd_sharding_propagation_to_parameters: Vec<bool>,
    /// Per result (or one value for all), whether XLA may choose its sharding
    /// (`allow_spmd_sharding_propagation_to_output = 12`).
    #[prost(bool, repeated, tag = "12")]
    pub allow_spmd_sharding_propagation_to_output: Vec<bool>,
    /// Whether to use the Shardy partitioner instead of GSPMD's propagation and partitioner
    /// (`use_shardy_partitioner = 19` in XLA's `xla/pjrt/proto/compile_options.proto`).
    #[prost(bool, tag = "19")]
    pub use_shardy_partitioner: bool,
}

/// `xla.OptionOverrideProto`: the value of one compiler option.
#[derive(Clone, PartialEq, Message)]
pub struct OptionOverrideProto {
    /// The value.
    #[prost(oneof = "OptionOverride", tags = "1, 2, 3, 4")]
    pub value: Option<OptionOverride>,
}

/// A compiler option's value (`OptionOverrideProto.value`).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum OptionOverride {
    /// `string_field`.
    #[prost(string, tag = "1")]
    String(String),
    /// `bool_field`.
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// `int_field`.
    #[prost(int64, tag = "3")]
    Int(i64),
    /// `double_field`.
    #[prost(double, tag = "4")]
    Double(f64),
}

impl OptionOverride {
    /// The value written as text (a command line's `NAME=VALUE`): `true`/`false` a bool, an
    /// integer an int, another number a double, anything else a string.
    pub fn parse(text: &str) -> OptionOverride {
        match text {
            "true" | "True" => OptionOverride::Bool(true),
            "false" | "False" => OptionOverride::Bool(false),
            _ => text
                .parse::<i64>()
                .map(OptionOverride::Int)
                .or_else(|_| text.parse::<f64>().map(OptionOverride::Double))
                .unwrap_or_else(|_| OptionOverride::String(text.to_owned())),
        }
    }
}

// `CompileOptions` compares as a whole; a `Double` of NaN is unequal to itself, as floats are.
impl Eq for OptionOverride {}

/// `xla.CompileOptionsProto` (the fields Tessera uses).
#[derive(Clone, PartialEq, Message)]
pub struct CompileOptionsProto {
    /// Build options.
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// Compiler options by name (`env_option_overrides = 7`): XLA's `DebugOptions` fields
    /// (`xla_*`) and the build options' own, as JAX's `compile(compiler_options=...)` passes them.
    #[prost(btree_map = "string, message", tag = "7")]
    pub env_option_overrides: std::collections::BTreeMap<String, OptionOverrideProto>,
}

/// How to compile a program: replicas × partitions and the devices that run them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// Number of replicas (Tessera uses 1: it partitions, it does not replicate programs).
    pub num_replicas: usize,
    /// Number of SPMD partitions.
    pub num_partitions: usize,
    /// Device id of each partition (replica 0), in partition order. Empty: XLA's default.
    pub devices: Vec<i64>,
    /// Use Shardy rather than GSPMD for partitioning.
    pub use_shardy: bool,
    /// Per result, whether XLA chooses its sharding (JAX's `UNSPECIFIED` out sharding, sent as
    /// `allow_spmd_sharding_propagation_to_output`); empty: every result keeps the module's.
    pub propagate_to_outputs: Vec<bool>,
    /// Per parameter, whether XLA chooses its sharding (JAX's `AUTO` in sharding, sent as
    /// `allow_spmd_sharding_propagation_to_parameters`); empty: every parameter keeps the
    /// module's.
    pub propagate_to_parameters: Vec<bool>,
    /// Compiler options by name (e.g. `xla_cpu_enable_fast_math`, `xla_dump_to`), passed to
    /// the plugin, which refuses a name it does not know.
    pub overrides: std::collections::BTreeMap<String, OptionOverride>,
}

impl CompileOptions {
    /// SPMD over `devices` (one partition each, in order).
    pub fn spmd(devices: &[i64]) -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: devices.len().max(1),
            devices: devices.to_vec(),
            use_shardy: false,
            propagate_to_outputs: Vec::new(),
            propagate_to_parameters: Vec::new(),
            overrides: Default::default(),
        }
    }

    /// The same options with compiler option `name` set to `value` (JAX's
    /// `compile(compiler_options={name: value})`).
    pub fn with_override(mut self, name: &str, value: OptionOverride) -> Self {
        self.overrides.insert(name.to_owned(), value);
        self
    }

    /// The same options, asking XLA for Shardy (`true`) or GSPMD (`false`); the module must
    /// carry that partitioner's annotations (`sdy.sharding` or `mhlo.sharding`).
    pub fn with_shardy(mut self, use_shardy: bool) -> Self {
        self.use_shardy = use_shardy;
        self
    }

    /// The same options letting XLA choose the sharding of each result marked `true`.
    pub fn with_output_propagation(mut self, per_output: &[bool]) -> Self {
        self.propagate_to_outputs = per_output.to_vec();
        self
    }

    /// The same options letting XLA choose the sharding of each parameter marked `true`.
    pub fn with_parameter_propagation(mut self, per_parameter: &[bool]) -> Self {
        self.propagate_to_parameters = per_parameter.to_vec();
        self
    }

    /// The serialized `CompileOptionsProto`.
    pub fn to_proto_bytes(&self) -> Vec<u8> {
        let device_assignment = (!self.devices.is_empty()).then(|| DeviceAssignmentProto {
            replica_count: self.num_replicas as i32,
            computation_count: self.num_partitions as i32,
            computation_devices: self
                .devices
                .iter()
                .map(|&d| ComputationDevice {
                    replica_device_ids: vec![d],
                })
                .collect(),
        });
        let build = ExecutableBuildOptionsProto {
            device_ordinal: -1,
            num_replicas: self.num_replicas as i64,
            num_partitions: self.num_partitions as i64,
            use_spmd_partitioning: self.num_partitions > 1,
            device_assignment,
            allow_spmd_sharding_propagation_to_parameters: self.propagate_to_parameters.clone(),
            allow_spmd_sharding_propagation_to_output: self.propagate_to_outputs.clone(),
            use_shardy_partitioner: self.use_shardy,
        };
        CompileOptionsProto {
            executable_build_options: Some(build),
            env_option_overrides: self
                .overrides
                .iter()
                .map(|(name, value)| {
                    let value = Some(value.clone());
                    (name.clone(), OptionOverrideProto { value })
                })
                .collect(),
        }
        .encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spmd_options_round_trip_through_the_proto() {
        let bytes = CompileOptions::spmd(&[4, 5, 6, 7]).to_proto_bytes();
        let proto = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        let build = proto.executable_build_options.unwrap();
        assert_eq!(
            (
                build.num_replicas,
                build.num_partitions,
                build.use_spmd_partitioning
            ),
            (1, 4, true)
        );
        let assignment = build.device_assignment.unwrap();
        assert_eq!(assignment.computation_count, 4);
        let ids: Vec<i64> = assignment
            .computation_devices
            .iter()
            .map(|c| c.replica_device_ids[0])
            .collect();
        assert_eq!(ids, [4, 5, 6, 7]);
        assert!(!build.use_shardy_partitioner);
        let shardy = CompileOptions::spmd(&[0, 1])
            .with_shardy(true)
            .to_proto_bytes();
        let proto = CompileOptionsProto::decode(shardy.as_slice()).unwrap();
        assert!(
            proto
                .executable_build_options
                .unwrap()
                .use_shardy_partitioner
        );
        let open = CompileOptions::spmd(&[0, 1])
            .with_output_propagation(&[true, false])
            .with_parameter_propagation(&[false, true])
            .to_proto_bytes();
        let build = CompileOptionsProto::decode(open.as_slice())
            .unwrap()
            .executable_build_options
            .unwrap();
        assert_eq!(
            build.allow_spmd_sharding_propagation_to_output,
            [true, false]
        );
        assert_eq!(
            build.allow_spmd_sharding_propagation_to_parameters,
            [false, true]
        );
    }

    #[test]
    fn option_values_parse_as_their_kind() {
        assert_eq!(OptionOverride::parse("true"), OptionOverride::Bool(true));
        assert_eq!(OptionOverride::parse("False"), OptionOverride::Bool(false));
        assert_eq!(OptionOverride::parse("-3"), OptionOverride::Int(-3));
        assert_eq!(OptionOverride::parse("0.5"), OptionOverride::Double(0.5));
        assert_eq!(
            OptionOverride::parse("/tmp/x"),
            OptionOverride::String("/tmp/x".into())
        );
    }

    #[test]
    fn compiler_options_are_env_option_overrides_in_name_order() {
        let options = CompileOptions::spmd(&[0])
            .with_override("xla_dump_to", OptionOverride::String("/tmp/d".into()))
            .with_override("xla_cpu_enable_fast_math", OptionOverride::Bool(false));
        let bytes = options.to_proto_bytes();
        let proto = CompileOptionsProto::decode(bytes.as_slice()).unwrap();
        let names: Vec<&str> = proto
            .env_option_overrides
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(names, ["xla_cpu_enable_fast_math", "xla_dump_to"]);
        assert_eq!(
            proto.env_option_overrides["xla_dump_to"].value,
            Some(OptionOverride::String("/tmp/d".into()))
        );
        // The bytes (and so the compile cache's key) do not depend on insertion order.
        let swapped = CompileOptions::spmd(&[0])
            .with_override("xla_cpu_enable_fast_math", OptionOverride::Bool(false))
            .with_override("xla_dump_to", OptionOverride::String("/tmp/d".into()));
        assert_eq!(swapped.to_proto_bytes(), bytes);
        assert_ne!(CompileOptions::spmd(&[0]).to_proto_bytes(), bytes);
    }
}
