//! Spend records: one per completed request, written in batches (the gateway's group-commit writer calls
//! [`Store::insert_spend_batch`] with the records of many concurrent requests), and the queries that read
//! them back for `/spend/logs`, `svc spend` and for rebuilding period spend at start.

use crate::{Backend, Store, StoreError};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyArguments;
use sqlx::error::BoxDynError;
use sqlx::{Arguments, Row};
use std::borrow::Borrow;

/// One request's spend (`Default`: every field empty, 0 or `None`, for building a record field by field).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendRecord {
    /// The record's own id, unique in the store: a record written twice (a batch retried after a commit whose
    /// answer was lost, a journal replayed) is kept once.
    pub record_id: String,
    /// The node that served the request.
    pub node: Option<String>,
    /// The request id (`x-request-id`).
    pub request_id: String,
    /// Completion time.
    pub ts_ms: i64,
    /// Key id (`None` for the master key).
    pub key_id: Option<String>,
    /// Team of the key.
    pub team_id: Option<String>,
    /// Agent role of the key.
    pub agent_role: Option<String>,
    /// Alias the client asked for.
    pub model_alias: String,
    /// Upstream model id.
    pub upstream_model: String,
    /// Deployment that served it.
    pub deployment: String,
    /// Input tokens.
    pub prompt_tokens: i64,
    /// Output tokens.
    pub completion_tokens: i64,
    /// Cost in nano-units.
    pub cost: i64,
    /// HTTP status returned to the client.
    pub status: i64,
    /// Total latency.
    pub latency_ms: i64,
    /// The client API (`chat`, `messages`, `responses`, `embeddings`).
    #[serde(default)]
    pub api: Option<String>,
    /// The client family (`claude-cli`, `codex_exec`, `OpenAI/Python`, …).
    #[serde(default)]
    pub client: Option<String>,
    /// The agent's session id.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The stored response the request created upstream (`resp_…`, Responses only): who may read or continue
    /// it is the record's key (see [`Store::response_owner`]).
    #[serde(default)]
    pub response_id: Option<String>,
    /// Of the input tokens, those read from the prompt cache.
    #[serde(default)]
    pub cache_read_tokens: i64,
    /// Of the input tokens, those written to the prompt cache.
    #[serde(default)]
    pub cache_write_tokens: i64,
    /// Server-side tool uses billed (web searches).
    #[serde(default)]
    pub tool_uses: i64,
    /// The part of `cost` for input tokens neither read from nor written to the cache, nano-units.
    #[serde(default)]
    pub input_cost: i64,
    /// The part for output tokens.
    #[serde(default)]
    pub output_cost: i64,
    /// The part for prompt-cache reads.
    #[serde(default)]
    pub cache_read_cost: i64,
    /// The part for prompt-cache writes.
    #[serde(default)]
    pub cache_write_cost: i64,
    /// The part for server-side tool uses.
    #[serde(default)]
    pub tool_cost: i64,
    /// What the cost rests on: `billed`, `over_reservation`, `estimated` or `reservation` (`None`: a record
    /// written before the basis was kept).
    #[serde(default)]
    pub basis: Option<String>,
}

/// Who created a stored response and which deployment holds it, from its spend record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseOwner {
    /// The creating key's id (`None`: the master key).
    pub key_id: Option<String>,
    /// The creating key's team (`None`: the master key).
    pub team_id: Option<String>,
    /// The alias it was answered under.
    pub model_alias: String,
    /// The deployment that answered it.
    pub deployment: String,
    /// Its input and output tokens as billed: what a continuation carries on as input.
    pub tokens: i64,
}

/// Filters for [`Store::query_spend`]. `None` means any.
#[derive(Debug, Clone, Default)]
pub struct SpendFilter {
    /// Team.
    pub team_id: Option<String>,
    /// Key id.
    pub key_id: Option<String>,
    /// Alias.
    pub model: Option<String>,
    /// Client family.
    pub client: Option<String>,
    /// Agent session id.
    pub session_id: Option<String>,
    /// Inclusive start.
    pub start_ms: Option<i64>,
    /// Exclusive end.
    pub end_ms: Option<i64>,
}

/// What [`Store::spend_totals`] groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendGroup {
    /// Per team (`(master key)` for the master key's records).
    Team,
    /// Per key id.
    Key,
    /// Per alias.
    Model,
    /// Per client family.
    Client,
    /// Per agent session.
    Session,
    /// Per client API.
    Api,
}

impl SpendGroup {
    /// Every grouping, in the order `svc spend` shows them by default (the first three) and lists them.
    pub const ALL: [SpendGroup; 6] = [
        SpendGroup::Team,
        SpendGroup::Key,
        SpendGroup::Model,
        SpendGroup::Client,
        SpendGroup::Session,
        SpendGroup::Api,
    ];

    /// Its name in `group_by=` and `svc spend --by`.
    pub fn name(self) -> &'static str {
        match self {
            SpendGroup::Team => "team",
            SpendGroup::Key => "key",
            SpendGroup::Model => "model",
            SpendGroup::Client => "client",
            SpendGroup::Session => "session",
            SpendGroup::Api => "api",
        }
    }

    /// The grouping named `text`; the error lists the names.
    pub fn parse(text: &str) -> Result<SpendGroup, String> {
        SpendGroup::ALL.into_iter().find(|g| g.name() == text).ok_or_else(|| {
            let names: Vec<&str> = SpendGroup::ALL.iter().map(|g| g.name()).collect();
            format!("must be one of {}, not `{text}`", names.join(", "))
        })
    }

    fn column(self) -> &'static str {
        match self {
            SpendGroup::Team => "team_id",
            SpendGroup::Key => "key_id",
            SpendGroup::Model => "model_alias",
            SpendGroup::Client => "client",
            SpendGroup::Session => "session_id",
            SpendGroup::Api => "api",
        }
    }

    /// The label of records without a value.
    fn missing(self) -> &'static str {
        match self {
            SpendGroup::Team | SpendGroup::Key => "(master key)",
            SpendGroup::Model | SpendGroup::Client | SpendGroup::Session | SpendGroup::Api => "(unknown)",
        }
    }
}

/// A sum of spend over a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpendTotal {
    /// The group's label (team, key id or alias).
    pub group: String,
    /// Requests.
    pub requests: i64,
    /// Input tokens.
    pub prompt_tokens: i64,
    /// Output tokens.
    pub completion_tokens: i64,
    /// Cost in nano-units (summed exactly, clamped to what an `i64` holds).
    pub cost: i64,
}

/// The most tokens of one kind a spend record may hold (the store refuses more).
pub const MAX_RECORD_TOKENS: i64 = 1_000_000_000;
/// The largest cost one spend record may hold, in nano-units (1,000,000 units; the store refuses more).
pub const MAX_RECORD_COST: i64 = 1_000_000_000_000_000;

/// Nano-units per unit: sums are taken in two parts (whole units and the rest), so that no sum of sane
/// records can overflow the database's 64-bit integers, and put together in `i128`.
const NANOS: i64 = 1_000_000_000;

/// A record's numbers, each in the range the store accepts: prompt and completion tokens, cost, latency, then
/// cache-read, cache-write tokens, tool uses, and the five cost parts.
pub(crate) type Sane = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);

impl SpendRecord {
    /// The record with every number in the range the store accepts: tokens and tool uses in
    /// `0..=MAX_RECORD_TOKENS`, costs in `0..=MAX_RECORD_COST`, latency at least 0. Returns whether anything had
    /// to change.
    pub fn clamp(&mut self) -> bool {
        let before = self.numbers();
        let sane = self.in_range();
        (
            self.prompt_tokens,
            self.completion_tokens,
            self.cost,
            self.latency_ms,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.tool_uses,
            self.input_cost,
            self.output_cost,
            self.cache_read_cost,
            self.cache_write_cost,
            self.tool_cost,
        ) = sane;
        before != sane
    }

    fn numbers(&self) -> Sane {
        (
            self.prompt_tokens,
            self.completion_tokens,
            self.cost,
            self.latency_ms,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.tool_uses,
            self.input_cost,
            self.output_cost,
            self.cache_read_cost,
            self.cache_write_cost,
            self.tool_cost,
        )
    }

    /// Every number, clamped into the range the store accepts (in [`Sane`]'s order).
    pub(crate) fn in_range(&self) -> Sane {
        let tokens = |n: i64| n.clamp(0, MAX_RECORD_TOKENS);
        let money = |n: i64| n.clamp(0, MAX_RECORD_COST);
        (
            tokens(self.prompt_tokens),
            tokens(self.completion_tokens),
            money(self.cost),
            self.latency_ms.max(0),
            tokens(self.cache_read_tokens),
            tokens(self.cache_write_tokens),
            tokens(self.tool_uses),
            money(self.input_cost),
            money(self.output_cost),
            money(self.cache_read_cost),
            money(self.cache_write_cost),
            money(self.tool_cost),
        )
    }

    /// Whether every number is in range already.
    pub(crate) fn is_sane(&self) -> bool {
        self.numbers() == self.in_range()
    }
}

/// A `WHERE` clause of the filters that are set, with `$n` parameters from `$first` on, so each query can
/// use the index that fits (a catch-all `($1 IS NULL OR …)` would defeat them all).
struct Where<'f> {
    sql: String,
    binds: Vec<Bind<'f>>,
}

enum Bind<'f> {
    Text(&'f str),
    Int(i64),
}

impl<'f> Where<'f> {
    fn of(f: &'f SpendFilter) -> Where<'f> {
        let mut w = Where { sql: String::new(), binds: Vec::new() };
        if let Some(t) = &f.team_id {
            w.push("team_id =", Bind::Text(t));
        }
        if let Some(k) = &f.key_id {
            w.push("key_id =", Bind::Text(k));
        }
        if let Some(m) = &f.model {
            w.push("model_alias =", Bind::Text(m));
        }
        if let Some(c) = &f.client {
            w.push("client =", Bind::Text(c));
        }
        if let Some(sid) = &f.session_id {
            w.push("session_id =", Bind::Text(sid));
        }
        if let Some(t) = f.start_ms {
            w.push("ts_ms >=", Bind::Int(t));
        }
        if let Some(t) = f.end_ms {
            w.push("ts_ms <", Bind::Int(t));
        }
        w
    }

    fn push(&mut self, condition: &str, bind: Bind<'f>) {
        self.sql.push_str(if self.binds.is_empty() { " WHERE " } else { " AND " });
        self.sql.push_str(condition);
        self.binds.push(bind);
        self.sql.push_str(&format!(" ${}", self.binds.len()));
    }

    /// The next free parameter number.
    fn next(&self) -> usize {
        self.binds.len() + 1
    }

    fn bind<'q>(
        &'q self,
        mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        for b in &self.binds {
            q = match b {
                Bind::Text(t) => q.bind(*t),
                Bind::Int(i) => q.bind(*i),
            };
        }
        q
    }
}

/// The values of one spend row ([`bind_all`]), in the column order of [`insert_spend_sql`].
const SPEND_COLUMNS: usize = 28;
/// Of them, those a row without prompt-cache or server-tool use leaves at their default 0 (a lean row).
const CACHE_AND_TOOL_COLUMNS: usize = 6;

/// Whether a record used no prompt cache and no server-side tool: its row can leave those columns to their
/// default 0 (six bound values fewer, most of the records of plain traffic).
fn is_lean(r: &SpendRecord) -> bool {
    (r.cache_read_tokens | r.cache_write_tokens | r.tool_uses | r.cache_read_cost | r.cache_write_cost | r.tool_cost)
        == 0
}

/// The text of a spend INSERT of `rows` rows (a power of two up to 512), of lean rows or whole ones, made once
/// per backend, row count and shape.
fn insert_spend_sql(backend: Backend, rows: usize, lean: bool) -> &'static str {
    use std::sync::OnceLock;
    static TEXTS: [[[OnceLock<String>; 10]; 2]; 2] = [const { [const { [const { OnceLock::new() }; 10] }; 2] }; 2];
    debug_assert!(rows.is_power_of_two() && rows <= 512);
    let slot =
        &TEXTS[usize::from(backend == Backend::Postgres)][usize::from(lean)][rows.trailing_zeros().min(9) as usize];
    slot.get_or_init(|| {
        let mut sql = String::from(
            "INSERT INTO spend_log (record_id, node, request_id, ts_ms, key_id, team_id, agent_role, model_alias, \
             upstream_model, deployment, prompt_tokens, completion_tokens, cost, status, latency_ms, api, client, session_id, response_id, ",
        );
        sql.push_str(if lean {
            "input_cost, output_cost, basis) VALUES "
        } else {
            "cache_read_tokens, cache_write_tokens, tool_uses, input_cost, output_cost, cache_read_cost, cache_write_cost, \
             tool_cost, basis) VALUES "
        });
        let columns = if lean { SPEND_COLUMNS - CACHE_AND_TOOL_COLUMNS } else { SPEND_COLUMNS };
        crate::push_values(&mut sql, backend, rows, columns);
        sql.push_str(" ON CONFLICT (record_id) DO NOTHING");
        sql
    })
}

/// The [`SPEND_COLUMNS`] values of a spend row, in [`insert_spend_sql`]'s column order, `sane` its numbers in
/// range (`lean`: without the cache and tool columns). Strings are bound borrowed: no copy per record here
/// (sqlx's worker copies them).
fn bind_all<'q>(args: &mut AnyArguments<'q>, r: &'q SpendRecord, sane: Sane, lean: bool) -> Result<(), BoxDynError> {
    args.add(r.record_id.as_str())?;
    args.add(r.node.as_deref())?;
    args.add(r.request_id.as_str())?;
    args.add(r.ts_ms)?;
    args.add(r.key_id.as_deref())?;
    args.add(r.team_id.as_deref())?;
    args.add(r.agent_role.as_deref())?;
    args.add(r.model_alias.as_str())?;
    args.add(r.upstream_model.as_str())?;
    args.add(r.deployment.as_str())?;
    args.add(sane.0)?;
    args.add(sane.1)?;
    args.add(sane.2)?;
    args.add(r.status)?;
    args.add(sane.3)?;
    args.add(r.api.as_deref())?;
    args.add(r.client.as_deref())?;
    args.add(r.session_id.as_deref())?;
    args.add(r.response_id.as_deref())?;
    if lean {
        args.add(sane.7)?;
        args.add(sane.8)?;
    } else {
        for n in [sane.4, sane.5, sane.6, sane.7, sane.8, sane.9, sane.10, sane.11] {
            args.add(n)?;
        }
    }
    args.add(r.basis.as_deref())
}

/// The exact sum of a cost column summed in two parts (`units`, `rest`).
fn join_sum(units: i64, rest: i64) -> i128 {
    i128::from(units) * i128::from(NANOS) + i128::from(rest)
}

impl Store {
    /// Writes many records in one transaction (group commit), as multi-row INSERTs of bound parameters. A
    /// record with a number outside what the store accepts is clamped into range and logged, never refused,
    /// so one bad record cannot hold back the others.
    pub async fn insert_spend_batch<R: Borrow<SpendRecord> + Sync>(&self, records: &[R]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        // Chunks of a power of two rows (13 = 8 + 4 + 1), at most 512 (19 parameters a row stay under SQLite's
        // and PostgreSQL's parameter limits): a statement's text depends only on its row count, so the
        // connection's statement cache holds all ten and a batch is never parsed again (parsing a statement of
        // many rows cost more than inserting them). One statement is atomic by itself: a batch of one chunk skips
        // BEGIN/COMMIT, a round trip each to the database.
        const ROWS: usize = 512;
        self.restart_wal_if_due().await;
        let mut chunks = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let n = rest.len().min(ROWS);
            let (chunk, more) = rest.split_at(1 << (usize::BITS - 1 - n.leading_zeros()));
            chunks.push(chunk);
            rest = more;
        }
        let single = chunks.len() == 1;
        let mut tx = if single { None } else { Some(self.writer().begin().await?) };
        for chunk in chunks {
            // The arguments are sized once: bound one by one, their vector grew (and was copied) log2(19 n) times.
            let mut args = AnyArguments::default();
            // A chunk of records that used no prompt cache and no server-side tool binds six values fewer a row.
            let lean = chunk.iter().all(|r| is_lean(r.borrow()));
            args.reserve(chunk.len() * SPEND_COLUMNS, 0);
            for r in chunk {
                let r: &SpendRecord = r.borrow();
                let sane = r.in_range();
                if !r.is_sane() {
                    tracing::error!(request_id = %r.request_id, prompt_tokens = r.prompt_tokens, completion_tokens = r.completion_tokens,
                        cost = r.cost, "a spend record out of range was clamped before it was stored");
                }
                bind_all(&mut args, r, sane, lean).map_err(sqlx::Error::Encode)?;
            }
            let q = sqlx::query_with(insert_spend_sql(self.backend(), chunk.len(), lean), args);
            match tx.as_mut() {
                Some(tx) => q.execute(&mut **tx).await?,
                None => q.execute(self.writer()).await?,
            };
        }
        if let Some(tx) = tx {
            tx.commit().await?;
        }
        Ok(())
    }

    /// Who created the stored response `response_id` through the gateway, and where it is kept; `None` when no
    /// spend record names it (an id the gateway did not serve, or whose record is not written yet).
    pub async fn response_owner(&self, response_id: &str) -> Result<Option<ResponseOwner>, StoreError> {
        let row = sqlx::query(
            "SELECT key_id, team_id, model_alias, deployment, prompt_tokens, completion_tokens FROM spend_log \
             WHERE response_id = $1 ORDER BY ts_ms LIMIT 1",
        )
        .bind(response_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| {
            Ok(ResponseOwner {
                key_id: r.try_get("key_id")?,
                team_id: r.try_get("team_id")?,
                model_alias: r.try_get("model_alias")?,
                deployment: r.try_get("deployment")?,
                tokens: r.try_get::<i64, _>("prompt_tokens")?.saturating_add(r.try_get("completion_tokens")?),
            })
        })
        .transpose()
    }

    /// Records matching `f`, newest first, `limit` from `offset`.
    pub async fn query_spend(&self, f: &SpendFilter, limit: i64, offset: i64) -> Result<Vec<SpendRecord>, StoreError> {
        let w = Where::of(f);
        let n = w.next();
        let sql = format!(
            "SELECT COALESCE(record_id, CAST(id AS TEXT)) AS record_id, node, request_id, ts_ms, key_id, team_id, agent_role, \
             model_alias, upstream_model, deployment, prompt_tokens, completion_tokens, cost, status, latency_ms, api, client, session_id, \
             response_id, cache_read_tokens, cache_write_tokens, tool_uses, input_cost, output_cost, cache_read_cost, \
             cache_write_cost, tool_cost, basis FROM spend_log{} ORDER BY ts_ms DESC, id DESC LIMIT ${n} OFFSET ${}",
            w.sql,
            n + 1
        );
        let rows = w.bind(sqlx::query(&sql)).bind(limit).bind(offset).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                Ok(SpendRecord {
                    record_id: r.try_get("record_id")?,
                    node: r.try_get("node")?,
                    request_id: r.try_get("request_id")?,
                    ts_ms: r.try_get("ts_ms")?,
                    key_id: r.try_get("key_id")?,
                    team_id: r.try_get("team_id")?,
                    agent_role: r.try_get("agent_role")?,
                    model_alias: r.try_get("model_alias")?,
                    upstream_model: r.try_get("upstream_model")?,
                    deployment: r.try_get("deployment")?,
                    prompt_tokens: r.try_get("prompt_tokens")?,
                    completion_tokens: r.try_get("completion_tokens")?,
                    cost: r.try_get("cost")?,
                    status: r.try_get("status")?,
                    latency_ms: r.try_get("latency_ms")?,
                    api: r.try_get("api")?,
                    client: r.try_get("client")?,
                    session_id: r.try_get("session_id")?,
                    response_id: r.try_get("response_id")?,
                    cache_read_tokens: r.try_get("cache_read_tokens")?,
                    cache_write_tokens: r.try_get("cache_write_tokens")?,
                    tool_uses: r.try_get("tool_uses")?,
                    input_cost: r.try_get("input_cost")?,
                    output_cost: r.try_get("output_cost")?,
                    cache_read_cost: r.try_get("cache_read_cost")?,
                    cache_write_cost: r.try_get("cache_write_cost")?,
                    tool_cost: r.try_get("tool_cost")?,
                    basis: r.try_get("basis")?,
                })
            })
            .collect()
    }

    /// Sum of cost of records matching `f` (the period spend of a team or key), in nano-units, exact.
    pub async fn sum_spend(&self, f: &SpendFilter) -> Result<i128, StoreError> {
        let w = Where::of(f);
        // PostgreSQL sums BIGINT as NUMERIC, which the Any driver cannot decode: cast back (each part fits).
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(cost / {NANOS}), 0) AS BIGINT), CAST(COALESCE(SUM(cost % {NANOS}), 0) AS BIGINT) \
             FROM spend_log{}",
            w.sql
        );
        let row = w.bind(sqlx::query(&sql)).fetch_one(self.pool()).await?;
        Ok(join_sum(row.try_get(0)?, row.try_get(1)?))
    }

    /// Totals grouped by team, key or alias, for records matching `f`, dearest first.
    pub async fn spend_totals(&self, group: SpendGroup, f: &SpendFilter) -> Result<Vec<SpendTotal>, StoreError> {
        let w = Where::of(f);
        let (column, missing) = (group.column(), group.missing());
        let sql = format!(
            "SELECT COALESCE({column}, '{missing}') AS g, COUNT(*) AS n, CAST(COALESCE(SUM(prompt_tokens),0) AS BIGINT) AS p, \
             CAST(COALESCE(SUM(completion_tokens),0) AS BIGINT) AS c, CAST(COALESCE(SUM(cost / {NANOS}),0) AS BIGINT) AS su, \
             CAST(COALESCE(SUM(cost % {NANOS}),0) AS BIGINT) AS sr FROM spend_log{} GROUP BY g",
            w.sql
        );
        let rows = w.bind(sqlx::query(&sql)).fetch_all(self.pool()).await?;
        let mut totals = rows
            .iter()
            .map(|r| {
                let cost = join_sum(r.try_get("su")?, r.try_get("sr")?);
                Ok(SpendTotal {
                    group: r.try_get("g")?,
                    requests: r.try_get("n")?,
                    prompt_tokens: r.try_get("p")?,
                    completion_tokens: r.try_get("c")?,
                    cost: i64::try_from(cost).unwrap_or(i64::MAX),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        totals.sort_by(|a, b| b.cost.cmp(&a.cost).then_with(|| a.group.cmp(&b.group)));
        Ok(totals)
    }
}
