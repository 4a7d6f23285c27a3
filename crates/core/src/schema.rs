//! Machine-readable resource schemas (`schemas/*.json`), embedded at build time.
