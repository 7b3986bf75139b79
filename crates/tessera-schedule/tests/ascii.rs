//! Snapshots of the ASCII timelines and statistics of small cases of every built-in.
//! Update with `UPDATE_EXPECT=1 cargo test -p tessera-schedule --test ascii`.

use expect_test::{Expect, expect};
use tessera_schedule::{Costs, Registry, ScheduleParams, render, simulate};

fn check(
    name: &str,
    stages: u32,
    mpmd_dim: u32,
    m: u32,
    (f, b, w): (f64, f64, f64),
    expect: Expect,
) {
    let plan = Registry::with_builtins()
        .create(name, ScheduleParams { stages, mpmd_dim })
        .and_then(|s| s.plan(m))
        .expect("parameters accepted");
    let sim = simulate(&plan, &Costs::uniform(stages, f, b, w)).expect("valid");
    let text = format!(
        "{}{}",
        render::ascii(&plan, &sim),
        render::stats(&plan, &sim)
    );
    expect.assert_eq(&text);
}

#[test]
fn gpipe() {
    check(
        "gpipe",
        3,
        3,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
        time    0              5              10             15
        actor 0 F0 F1 F2 F3 ..................B0    B1    B2    B3
        actor 1 ...F0 F1 F2 F3 .........B0    B1    B2    B3    ......
        actor 2 ......F0 F1 F2 F3 B0    B1    B2    B3    ............
        gpipe: 3 stages on 3 actors, 4 microbatches
        makespan:         18
        bubble ratio:     0.3333
        idle per actor:   [6, 6, 6]
        peak activations: [4, 4, 4]
    "#]],
    );
}

#[test]
fn one_f_one_b() {
    check(
        "1f1b",
        3,
        3,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
            time    0              5              10             15
            actor 0 F0 F1 F2 ............B0    F3 B1    ...B2    ...B3
            actor 1 ...F0 F1 ......B0    F2 B1    F3 B2    ...B3    ......
            actor 2 ......F0 B0    F1 B1    F2 B2    F3 B3    ............
            1f1b: 3 stages on 3 actors, 4 microbatches
            makespan:         18
            bubble ratio:     0.3333
            idle per actor:   [6, 6, 6]
            peak activations: [3, 2, 1]
        "#]],
    );
}

#[test]
fn one_f_one_b_fuse_last() {
    check(
        "1f1b-fuse-last",
        3,
        3,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
        time    0              5              10             15
        actor 0 F0 F1 F2 ............B0    F3 B1    ...B2    ...B3
        actor 1 ...F0 F1 ......B0    F2 B1    F3 B2    ...B3    ......
        actor 2 ......F0+B0    F1+B1    F2+B2    F3+B3    ............
        1f1b-fuse-last: 3 stages on 3 actors, 4 microbatches
        makespan:         18
        bubble ratio:     0.3333
        idle per actor:   [6, 6, 6]
        peak activations: [3, 2, 1]
    "#]],
    );
}

#[test]
fn eager_one_f_one_b() {
    check(
        "eager-1f1b",
        3,
        3,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
            time    0              5              10             15
            actor 0 F0 F1 F2 F3 .........B0    ...B1    ...B2    ...B3
            actor 1 ...F0 F1 F2 ...B0    F3 B1    ...B2    ...B3    ......
            actor 2 ......F0 B0    F1 B1    F2 B2    F3 B3    ............
            eager-1f1b: 3 stages on 3 actors, 4 microbatches
            makespan:         18
            bubble ratio:     0.3333
            idle per actor:   [6, 6, 6]
            peak activations: [4, 3, 1]
        "#]],
    );
}

#[test]
fn eager_one_f_one_b_fuse_last() {
    check(
        "eager-1f1b-fuse-last",
        3,
        3,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
        time    0              5              10             15
        actor 0 F0 F1 F2 F3 .........B0    ...B1    ...B2    ...B3
        actor 1 ...F0 F1 F2 ...B0    F3 B1    ...B2    ...B3    ......
        actor 2 ......F0+B0    F1+B1    F2+B2    F3+B3    ............
        eager-1f1b-fuse-last: 3 stages on 3 actors, 4 microbatches
        makespan:         18
        bubble ratio:     0.3333
        idle per actor:   [6, 6, 6]
        peak activations: [4, 3, 1]
    "#]],
    );
}

#[test]
fn interleaved_one_f_one_b() {
    check(
        "interleaved-1f1b",
        4,
        2,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
        time    0                        5                        10                       15                       20                       25
        actor 0 F0s0 F1s0 F0s2 F1s2 F2s0 .....B0s2      F3s0 B1s2      F2s2 B0s0      F3s2 B1s0      .....B2s2      .....B3s2      B2s0      B3s0
        actor 1 .....F0s1 F1s1 F0s3+B0s3      F1s3+B1s3      F2s1 B0s1      F3s1 B1s1      F2s3+B2s3      F3s3+B3s3      B2s1      B3s1      ..........
        interleaved-1f1b: 4 stages on 2 actors, 4 microbatches
        makespan:         27
        bubble ratio:     0.1111
        idle per actor:   [3, 3]
        peak activations: [5, 3]
    "#]],
    );
}

#[test]
fn interleaved_one_f_one_b_fused() {
    check(
        "interleaved-1f1b-fused",
        4,
        2,
        4,
        (1.0, 2.0, 0.0),
        expect![[r#"
        time    0                        5                        10                       15                       20                       25
        actor 0 F0s0 F1s0 F0s2 F1s2 ..........F2s0+B0s2      F3s0+B1s2      F2s2+B0s0      F3s2+B1s0      B2s2      .....B3s2      B2s0      B3s0
        actor 1 .....F0s1 F1s1 F0s3+B0s3      F1s3+B1s3      F2s1+B0s1      F3s1+B1s1      F2s3+B2s3      F3s3+B3s3      B2s1      B3s1      ..........
        interleaved-1f1b-fused: 4 stages on 2 actors, 4 microbatches
        makespan:         27
        bubble ratio:     0.1111
        idle per actor:   [3, 3]
        peak activations: [5, 3]
    "#]],
    );
}

#[test]
fn zero_bubble() {
    check(
        "zero-bubble",
        3,
        3,
        4,
        (1.0, 2.0, 1.0),
        expect![[r#"
            time    0              5              10
            actor 0 F0 F1 F2 ......I0 W0 F3 I1 W1 I2 W2 I3 W3
            actor 1 ...F0 F1 ...I0 F2 I1 W0 F3 I2 W1 I3 W2 W3
            actor 2 ......F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3
            zero-bubble: 3 stages on 3 actors, 4 microbatches
            makespan:         14
            bubble ratio:     0.1429
            idle per actor:   [2, 2, 2]
            peak activations: [3, 3, 3]
        "#]],
    );
}

#[test]
fn zero_bubble_fuse_ends() {
    check(
        "zero-bubble-fuse-ends",
        3,
        3,
        4,
        (1.0, 2.0, 1.0),
        expect![[r#"
        time    0              5              10
        actor 0 F0 F1 F2 ......I0+W0 F3 I1+W1 I2+W2 I3+W3
        actor 1 ...F0 F1 ...I0 F2 I1 W0 F3 I2 W1 I3 W2 W3
        actor 2 ......F0+I0 F1+I1 F2+I2 W0 F3+I3 W1 W2 W3
        zero-bubble-fuse-ends: 3 stages on 3 actors, 4 microbatches
        makespan:         14
        bubble ratio:     0.1429
        idle per actor:   [2, 2, 2]
        peak activations: [3, 3, 3]
    "#]],
    );
}

#[test]
fn dualpipev() {
    check(
        "dualpipev",
        4,
        2,
        5,
        (1.0, 2.0, 1.0),
        expect![[r#"
            time    0                        5                        10                       15                       20                       25                       30
            actor 0 F0s0 F1s0 F2s0 F0s3 I0s3 W0s3 F1s3 F3s0+I1s3+W1s3 .....F2s3+I0s0+W0s0 F4s0+I2s3+W2s3 F3s3+I1s0+W1s0 I3s3+W3s3 .....F4s3+I2s0+W2s0 I4s3+W4s3 I3s0+W3s0 .....I4s0+W4s0
            actor 1 .....F0s1 F0s2 F1s1 F1s2 F2s1 I0s2+W0s2 F2s2+I0s1+W0s1 F3s1+I1s2+W1s2 F3s2+I1s1+W1s1 F4s1+I2s2+W2s2 F4s2+I2s1+W2s1 I3s2+W3s2 I3s1+W3s1 .....I4s2 I4s1+W4s1 W4s2 .....
            dualpipev: 4 stages on 2 actors, 5 microbatches
            makespan:         33
            bubble ratio:     0.0909
            idle per actor:   [3, 3]
            peak activations: [5, 5]
        "#]],
    );
}

#[test]
fn dualpipev_deepseek() {
    check(
        "dualpipev-deepseek",
        4,
        2,
        5,
        (1.0, 2.0, 1.0),
        expect![[r#"
        time    0                        5                        10                       15                       20                       25                       30
        actor 0 F0s0 F1s0 F2s0 F0s3 I0s3 W0s3 F1s3 F3s0+B1s3      .....F2s3+B0s0      F4s0+B2s3      F3s3+B1s0      B3s3      .....F4s3+B2s0      B4s3      B3s0      B4s0
        actor 1 .....F0s1 F0s2 F1s1 F1s2 F2s1 B0s2      F2s2+B0s1      F3s1+B1s2      F3s2+B1s1      F4s1+B2s2      F4s2+B2s1      B3s2      B3s1      .....I4s2 I4s1 W4s2 W4s1
        dualpipev-deepseek: 4 stages on 2 actors, 5 microbatches
        makespan:         32
        bubble ratio:     0.0625
        idle per actor:   [2, 2]
        peak activations: [5, 5]
    "#]],
    );
}
