//! The loader on arbitrary text, as `main.hcl` then as `main.tf`, and then validated:
//! any input must end in a value or in diagnostics, never a panic, an abort (stack
//! overflow) or unbounded time or memory (libFuzzer's -timeout and -rss_limit_mb).
#![no_main]

use gpushare_config::{load_sources, validate, LoadOptions, Source};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for name in ["main.hcl", "main.tf"] {
        let sources = [Source {
            name: name.to_string(),
            text: text.to_string(),
        }];
        if let Ok(desired) = load_sources(&sources, &LoadOptions::default()) {
            let _ = validate(&desired);
        }
    }
});
