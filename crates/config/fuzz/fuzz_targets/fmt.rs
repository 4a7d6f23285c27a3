//! `gpushare fmt` on arbitrary text: no panic, and formatting is idempotent.
#![no_main]

use gpushare_config::{format_source, Source};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let src = |text: &str| Source {
        name: "main.hcl".into(),
        text: text.into(),
    };
    if let Ok(once) = format_source(&src(text)) {
        let twice = format_source(&src(&once)).expect("formatted text formats again");
        assert_eq!(once, twice, "fmt is not idempotent");
    }
});
