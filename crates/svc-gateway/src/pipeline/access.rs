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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use svc_keys::VirtualKey;

    const YAML: &str = "
model_list:
  - { model_name: gpt-x, params: { model: mock/gpt-x } }
  - { model_name: claude-*, params: { model: mock/claude } }
  - { model_name: other, params: { model: mock/other } }
gateway_settings:
  teams:
    - { team_id: open }
    - { team_id: narrow, models: [gpt-x, claude-*] }
";

    fn rig() -> (ModelTable, Config) {
        let config = svc_config::load_str(YAML, "t.yaml", svc_config::ConfigSource::Builtin, &|_| None).unwrap();
        let metrics = crate::observe::Metrics::new(false).unwrap();
        let table = ModelTable::build(&config, &svc_providers::UpstreamClient::new().unwrap(), &metrics).unwrap();
        (table, config)
    }

    fn key(team: &str, models: &[&str]) -> Principal {
        let row = svc_store::KeyRow {
            id: "k".into(),
            team_id: team.into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            metadata: "{}".into(),
            ..Default::default()
        };
        Principal::Key(Arc::new(VirtualKey::from_row(&row)))
    }

    /// The status and `type` of a refusal, or `None` when the alias is allowed.
    fn refusal(result: Result<(), ApiError>) -> Option<(u16, String)> {
        result.err().map(|e| (e.status().as_u16(), e.kind().to_string()))
    }

    #[test]
    fn an_unknown_alias_is_the_one_404_whoever_asks() {
        let (models, config) = rig();
        for who in [Principal::Master, key("open", &[])] {
            let e = check(&models, &config, &who, "nope").err().unwrap();
            assert_eq!((e.status().as_u16(), e.body()["error"]["code"].as_str()), (404, Some("model_not_found")));
        }
    }

    #[test]
    fn the_master_key_and_an_open_team_use_every_alias_a_wildcard_included() {
        let (models, config) = rig();
        for who in [Principal::Master, key("open", &[])] {
            for alias in ["gpt-x", "claude-opus", "other"] {
                assert_eq!(refusal(check(&models, &config, &who, alias)), None, "{alias}");
            }
        }
    }

    #[test]
    fn a_team_and_a_key_narrow_the_aliases_by_name_or_pattern() {
        let (models, config) = rig();
        let narrow = key("narrow", &[]);
        assert_eq!(refusal(check(&models, &config, &narrow, "claude-sonnet")), None, "listed by its pattern");
        let denied = Some((403, "team_model_access_denied".to_string()));
        assert_eq!(refusal(check(&models, &config, &narrow, "other")), denied);
        let only_gpt = key("open", &["gpt-x"]);
        assert_eq!(refusal(check(&models, &config, &only_gpt, "gpt-x")), None);
        let denied = Some((403, "key_model_access_denied".to_string()));
        assert_eq!(refusal(check(&models, &config, &only_gpt, "claude-opus")), denied);
    }

    #[test]
    fn a_key_of_a_team_the_config_does_not_know_is_refused() {
        let (models, config) = rig();
        let stray = key("gone", &[]);
        assert_eq!(refusal(check(&models, &config, &stray, "gpt-x")), Some((403, "team_model_access_denied".into())));
    }
}
