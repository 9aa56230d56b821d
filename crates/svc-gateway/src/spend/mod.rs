//! Spend persistence (not a stage of the pipeline): svc-store's [`Journal`](svc_store::journal::Journal), a
//! local file each spend record is appended to on the request's thread before the answer completes, and the
//! [`writer`], the one task that moves records into the store in batches (and, on a fleet node, charges the
//! budgets' leases with them).

pub mod writer;

pub use writer::SpendWriter;
