//! gpushare-bench: placement quality and speed on the Alibaba GPU-sharing trace
//! (openb), with the FGD paper's protocol, through the engine's own placement code.

pub mod policy;
pub mod protocol;
pub mod scale;
pub mod trace;
