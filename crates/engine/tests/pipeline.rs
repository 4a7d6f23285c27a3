//! observe -> plan (the real planner) -> apply -> agents, on the file store and the
//! local fleet: the store conformance suite (gpushare_testkit_engine::conformance),
//! which the etcd store's tests run too.

gpushare_testkit_engine::store_conformance_suite!(
    gpushare_testkit_engine::conformance::FileStores::new()
);
