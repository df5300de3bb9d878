//! A harness for tests that need something a machine may lack (an NVIDIA GPU, NVRTC): where it
//! is missing they are reported as ignored, with the reason, never as passed; where the
//! environment variable of the gate is `1` (set on GPU hosts and in CI) they run and fail.

use libtest_mimic::{Arguments, Completion, Failed, Trial};

/// What a group of tests needs.
pub struct Gate {
    /// The environment variable that turns "ignored" into "failed" (e.g. `ESOFLOW_REQUIRE_GPU`).
    pub require_env: &'static str,
    /// Why the tests cannot run here; `None` where they can.
    pub missing: Option<String>,
}

/// One test of the group: its name, its body and whether it is ignored by default (a
/// diagnostic run with `--ignored`).
pub struct Test {
    pub name: &'static str,
    pub body: fn(),
    pub diagnostic: bool,
    /// Why this test cannot run here where the group can (e.g. it needs two GPUs).
    pub missing: Option<String>,
}

/// `Test`s from function names; `diagnostic(f)` marks one ignored by default.
#[macro_export]
macro_rules! gated_tests {
    ($($kind:ident ( $f:ident )),* $(,)?) => {
        vec![$($crate::common::gate::Test { name: stringify!($f), body: $f, diagnostic: $crate::gated_tests!(@diag $kind), missing: None }),*]
    };
    (@diag test) => { false };
    (@diag diagnostic) => { true };
}

/// Run the tests (with the usual test arguments: filters, `--ignored`, `--test-threads`,
/// `--list`) and exit with the harness's code.
pub fn run(gate: Gate, tests: Vec<Test>) -> ! {
    let args = Arguments::from_args();
    let required = std::env::var(gate.require_env).as_deref() == Ok("1");
    let trials = tests
        .into_iter()
        .map(|t| {
            let missing = gate.missing.clone();
            let env = gate.require_env;
            // A test's own need (more devices than this machine has) is never a failure: the
            // gate's variable asks for the group's need, not for a larger machine.
            let own = t.missing;
            Trial::ignorable_test(t.name, move || match (missing, own) {
                (None, None) => {
                    (t.body)();
                    Ok(Completion::Completed)
                }
                (Some(why), _) if required => Err(Failed::from(format!("{env}=1 but this machine cannot run it: {why}"))),
                (Some(why), _) | (None, Some(why)) => Ok(Completion::ignored_with(format!("not run: {why}"))),
            })
            .with_ignored_flag(t.diagnostic)
        })
        .collect();
    libtest_mimic::run(&args, trials).exit()
}
