//! Pure money and budget-period math for svc: integer [`Money`], per-token [`Price`]s,
//! [`BudgetDuration`]s and the budget [`Period`] that contains a given instant.
//!
//! Nothing here does IO or reads a clock: callers pass `now`, so every rule is testable with an injected time.

mod account;
mod bill;
mod duration;
mod money;

pub use account::{Account, Notice, NoticeKind, Refusal, Slice};
pub use bill::{Cost, LongContext, Prices};
pub use duration::{BudgetDuration, DurationError, Period};
pub use money::{affordable_completion_tokens, Money, MoneyError, Price, Usage};
