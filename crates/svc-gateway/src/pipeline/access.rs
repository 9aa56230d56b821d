//! Model access (spec 8.3): an alias must exist (404 `model_not_found`) and be allowed to the caller's team
//! and key (403). The master key may use every alias.

use crate::error::ApiError;
use svc_config::Config;
use svc_keys::Principal;
use svc_routing::ModelTable;

/// Whether `principal` may use `alias` (`Ok`), or the error to answer.
pub fn check(models: &ModelTable, config: &Config, principal: &Principal, alias: &str) -> Result<(), ApiError> {
    if !models.contains(alias) {
        return Err(ApiError::unknown_model(alias));
    }
    allowed(config, principal, alias)
}

/// Whether an existing alias is allowed (used by `GET /models` too).
pub fn allowed(config: &Config, principal: &Principal, alias: &str) -> Result<(), ApiError> {
    let Some(key) = principal.key() else {
        return Ok(());
    };
    let Some(team) = config.team(&key.team_id) else {
        return Err(ApiError::forbidden(
            "team_model_access_denied",
            format!("team `{}` is not configured on this gateway", key.team_id),
        ));
    };
    let listed = |m: &String| m == alias || svc_routing::matches(m, alias).is_some();
    if !team.models.is_empty() && !team.models.iter().any(listed) {
        return Err(ApiError::forbidden(
            "team_model_access_denied",
            format!("team `{}` may not use model `{alias}`", key.team_id),
        )
        .with_param("model"));
    }
    if !key.models.is_empty() && !key.models.iter().any(listed) {
        return Err(ApiError::forbidden("key_model_access_denied", format!("this key may not use model `{alias}`"))
            .with_param("model"));
    }
    Ok(())
}
