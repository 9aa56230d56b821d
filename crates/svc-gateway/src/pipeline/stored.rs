//! What a client sees of stored responses (the homes themselves are svc-routing's `homes`): who owns what a
//! caller creates, and the 404 of a response the caller may not reach, the same as for an id the gateway never
//! served, so that its existence is not revealed.

use crate::error::ApiError;
use svc_keys::Principal;
use svc_routing::homes::{self, Home, Owner, MAX_ID_BYTES};
use svc_routing::ModelTable;
use svc_store::Store;

/// The owner of what `principal` creates, and who `principal` is when it asks for a stored response.
pub fn owner_of(principal: &Principal) -> Owner {
    match principal.key() {
        None => Owner::Master,
        Some(k) => Owner::Key { id: k.id.clone(), team: k.team_id.clone() },
    }
}

/// How an unknown (or unreachable) response is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// By its id in the path (`GET /responses/{id}` and the rest): 404 as OpenAI answers it.
    ById,
    /// By `previous_response_id`: 404 naming that field, as OpenAI answers it.
    AsPrevious,
}

/// The answer to a response `principal` may not reach or that does not exist: the same either way.
pub fn unknown(id: &str, asked: Asked) -> ApiError {
    let shown: String = id.chars().take(MAX_ID_BYTES).collect();
    match asked {
        Asked::ById => ApiError::not_found("invalid_request_error", format!("Response with id '{shown}' not found.")),
        Asked::AsPrevious => {
            ApiError::not_found("invalid_request_error", format!("Previous response with id '{shown}' not found."))
                .with_param("previous_response_id")
                .code("previous_response_not_found")
        }
    }
}

/// The home of response `id` when `principal` may reach it (svc-routing's [`homes::reach`]), else [`unknown`].
pub async fn reach(
    models: &ModelTable,
    store: &Store,
    shared_within_team: bool,
    principal: &Principal,
    id: &str,
    asked: Asked,
) -> Result<Home, ApiError> {
    match homes::reach(models, store, shared_within_team, &owner_of(principal), id).await? {
        Some(home) => Ok(home),
        None => Err(unknown(id, asked)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_unknown_response_reads_as_openai_answers_it() {
        let e = unknown("resp_x", Asked::AsPrevious);
        assert_eq!(e.status().as_u16(), 404);
        let body = e.body();
        assert_eq!(body["error"]["param"], "previous_response_id");
        assert_eq!(body["error"]["code"], "previous_response_not_found");
        assert_eq!(body["error"]["message"], "Previous response with id 'resp_x' not found.");
        assert_eq!(unknown("resp_x", Asked::ById).body()["error"]["message"], "Response with id 'resp_x' not found.");
    }
}
