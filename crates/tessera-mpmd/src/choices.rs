//! Two choices of a data-parallel group, each once per step (the default) or once per
//! micro-batch, with the names `tessera train` takes (`per-step`, `per-microbatch`).

/// Defines a two-way choice with `PerStep` (the default) and `PerMicrobatch`, its names, and
/// its parsing, printing and JSON form.
macro_rules! per_step_choice {
    ($(#[$doc:meta])* $name:ident, $what:literal, $step:literal, $microbatch:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            #[doc = $step]
            #[default]
            PerStep,
            #[doc = $microbatch]
            PerMicrobatch,
        }

        impl $name {
            /// Both, `per-step` first.
            pub const ALL: [$name; 2] = [$name::PerStep, $name::PerMicrobatch];

            /// The name the command-line flag takes.
            pub fn name(self) -> &'static str {
                match self {
                    $name::PerStep => "per-step",
                    $name::PerMicrobatch => "per-microbatch",
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                $name::ALL
                    .into_iter()
                    .find(|g| g.name() == s.trim())
                    .ok_or_else(|| {
                        format!(concat!("unknown ", $what, " `{}`; use per-step or per-microbatch"), s)
                    })
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

per_step_choice!(
    /// When a data-parallel stage's gradients (and the step's losses and metrics) are summed
    /// over the group's data-parallel axes (`--grad-reduce`).
    GradReduce,
    "gradient reduction",
    "Once per step: every backward adds its local, unreduced gradient to an accumulator laid \
     out unreduced over the data-parallel axes (each device a partial sum), the losses and \
     metrics stay partial too, and one program per group sums them after the step.",
    "In every backward (and every loss), as XLA's partitioner places the sum in each task."
);

per_step_choice!(
    /// When a group gathers the parameters it holds split over its data-parallel axes (FSDP,
    /// `--fsdp-gather`).
    FsdpGather,
    "FSDP gather",
    "Once per step, before the group's first task: the tasks read the gathered copy (whole \
     over the data-parallel axes), held until the step ends.",
    "In every task that reads them, the gradient reduced split in every backward (the least \
     memory: no gathered copy outlives a task)."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_choices_parse_their_names_and_refuse_others() {
        for g in GradReduce::ALL {
            assert_eq!(g.name().parse::<GradReduce>().unwrap(), g);
        }
        for g in FsdpGather::ALL {
            assert_eq!(g.to_string().parse::<FsdpGather>().unwrap(), g);
        }
        let err = "once".parse::<GradReduce>().unwrap_err();
        assert!(err.contains("use per-step or per-microbatch"), "{err}");
    }
}
