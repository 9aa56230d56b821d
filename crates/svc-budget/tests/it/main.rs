//! svc-budget's integration tests (one binary, one module per subject). Only the public API is used.

mod accounts;
