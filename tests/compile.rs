//! Compile-time proof of `#[rate_limit]`: every misuse fails with our own message on the
//! offending token (`tests/ui/fail`), and every supported form compiles and registers
//! (`tests/ui/pass`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
