//! What the cloud providers need beyond `api_base` and `api_key`, in LiteLLM's parameter names so a LiteLLM
//! `model_list` carries over: Azure OpenAI (`api_version`, `azure_ad_token`), Vertex AI (`vertex_project`,
//! `vertex_location`, `vertex_credentials`) and Bedrock (`aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`, `aws_region_name`, `aws_bedrock_runtime_endpoint`). Each falls back to the variables the
//! cloud's own tools read (`AZURE_API_VERSION`, `GOOGLE_APPLICATION_CREDENTIALS`, `AWS_REGION`, …), read when
//! the file is loaded, so a missing one is an error with the entry's line, not a failed request.
//!
//! What this file does not do: sign or exchange anything (svc-providers does, with the values made here).

use crate::node::Node;
use crate::reader::{Fields, Key, Reader};
use crate::types::{ProviderKind, Secret};
use std::path::Path;

/// The cloud parameters of `params` (with the entry's other keys).
pub(crate) const CLOUD_KEYS: &[Key] = &[
    ("api_version", &[]),
    ("azure_ad_token", &[]),
    ("vertex_project", &[]),
    ("vertex_location", &[]),
    ("vertex_credentials", &[]),
    ("aws_access_key_id", &[]),
    ("aws_secret_access_key", &[]),
    ("aws_session_token", &[]),
    ("aws_region_name", &[]),
    ("aws_bedrock_runtime_endpoint", &[]),
];

/// Azure OpenAI's `api-version` when neither `api_version` nor `AZURE_API_VERSION` names one (the newest GA
/// version of the data-plane API).
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";

/// A cloud deployment's own settings.
#[derive(Debug, Clone, Default)]
pub enum Cloud {
    /// Not a cloud provider (openai, anthropic, gemini, mock).
    #[default]
    None,
    /// `azure/<deployment>`.
    Azure(Azure),
    /// `vertex_ai/<model>`.
    Vertex(Vertex),
    /// `bedrock/<model id>`.
    Bedrock(Bedrock),
}

/// Azure OpenAI.
#[derive(Debug, Clone)]
pub struct Azure {
    /// `api_version`, else `AZURE_API_VERSION`, else [`AZURE_DEFAULT_API_VERSION`]. `v1`, `latest` or `preview`
    /// select the `/openai/v1` route (so does an `api_base` ending in `/openai/v1`).
    pub api_version: String,
    /// `azure_ad_token` (a Microsoft Entra ID access token), else `AZURE_AD_TOKEN`: sent as a bearer token when
    /// no `api_key` is given.
    pub ad_token: Option<Secret>,
}

/// Vertex AI.
#[derive(Debug, Clone)]
pub struct Vertex {
    /// `vertex_project`, else `VERTEXAI_PROJECT`, else the service account's `project_id`.
    pub project: String,
    /// `vertex_location`, else `VERTEXAI_LOCATION`, else `us-central1` (`global` is the global endpoint).
    pub location: String,
    /// The service account of `vertex_credentials` (a file, or the JSON itself), else of the file named by
    /// `GOOGLE_APPLICATION_CREDENTIALS`.
    pub account: ServiceAccount,
}

/// The parts of a Google service-account key file that sign its token requests.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ServiceAccount {
    /// `client_email`: the JWT's issuer.
    pub client_email: String,
    /// `private_key`: PEM (PKCS#8) RSA key.
    pub private_key: Secret,
    /// `private_key_id`: the JWT header's `kid`.
    #[serde(default)]
    pub private_key_id: Option<String>,
    /// `token_uri`: where the signed JWT is exchanged for an access token.
    #[serde(default = "default_token_uri")]
    pub token_uri: String,
    /// `project_id`.
    #[serde(default)]
    pub project_id: Option<String>,
}

fn default_token_uri() -> String {
    "https://oauth2.googleapis.com/token".into()
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret::new)
    }
}

/// Bedrock.
#[derive(Debug, Clone)]
pub struct Bedrock {
    /// `aws_region_name`, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
    pub region: String,
    /// `aws_bedrock_runtime_endpoint`, else `https://bedrock-runtime.{region}.amazonaws.com`.
    pub runtime_endpoint: Option<String>,
    /// How calls are authenticated.
    pub auth: AwsAuth,
}

/// Bedrock's authentication.
#[derive(Debug, Clone)]
pub enum AwsAuth {
    /// A Bedrock API key (`api_key`, else `AWS_BEARER_TOKEN_BEDROCK`), sent as a bearer token.
    ApiKey(Secret),
    /// SigV4 with these credentials (`aws_access_key_id` …, else `AWS_ACCESS_KEY_ID` …).
    SigV4 {
        /// The access key id.
        access_key_id: String,
        /// The secret access key.
        secret_access_key: Secret,
        /// The session token of temporary credentials.
        session_token: Option<Secret>,
    },
}

/// The cloud settings of an entry of `provider` (and its `api_key`, which Azure and Bedrock may take from the
/// environment instead); every missing or broken one is an error on the entry.
pub(crate) fn cloud(
    r: &mut Reader,
    node: &Node,
    p: &Fields,
    provider: Option<ProviderKind>,
    api_key: &mut Option<Secret>,
    base: Option<&Path>,
) -> Cloud {
    let given = |r: &mut Reader, key: &str, names: &[&str]| r.string(p, key).or_else(|| env(r, names));
    match provider {
        Some(ProviderKind::Azure) => {
            if api_key.is_none() {
                *api_key = env(r, &["AZURE_API_KEY"]).map(Secret::new);
            }
            let api_version =
                given(r, "api_version", &["AZURE_API_VERSION"]).unwrap_or_else(|| AZURE_DEFAULT_API_VERSION.into());
            let ad_token = given(r, "azure_ad_token", &["AZURE_AD_TOKEN"]).map(Secret::new);
            if api_key.is_none() && ad_token.is_none() {
                r.error(node, format!("{}: an azure/ deployment needs `api_key` (or AZURE_API_KEY) or `azure_ad_token` (or AZURE_AD_TOKEN)", p.path));
            }
            Cloud::Azure(Azure { api_version, ad_token })
        }
        Some(ProviderKind::Vertex) => {
            let text = given(r, "vertex_credentials", &["GOOGLE_APPLICATION_CREDENTIALS"]);
            let Some(account) = text.and_then(|t| service_account(r, node, p, &t, base)) else {
                if p.get("vertex_credentials").is_none() {
                    r.error(node, format!("{}: a vertex_ai/ deployment needs `vertex_credentials` (a service account's key file, or its JSON) or GOOGLE_APPLICATION_CREDENTIALS", p.path));
                }
                return Cloud::None;
            };
            let project = given(r, "vertex_project", &["VERTEXAI_PROJECT"]).or_else(|| account.project_id.clone());
            let Some(project) = project else {
                r.error(node, format!("{}: a vertex_ai/ deployment needs `vertex_project` (or VERTEXAI_PROJECT, or a `project_id` in its credentials)", p.path));
                return Cloud::None;
            };
            let location = given(r, "vertex_location", &["VERTEXAI_LOCATION"]).unwrap_or_else(|| "us-central1".into());
            Cloud::Vertex(Vertex { project, location, account })
        }
        Some(ProviderKind::Bedrock) => {
            let Some(region) = given(r, "aws_region_name", &["AWS_REGION", "AWS_DEFAULT_REGION"]) else {
                r.error(node, format!("{}: a bedrock/ deployment needs `aws_region_name` (or AWS_REGION)", p.path));
                return Cloud::None;
            };
            let runtime_endpoint = given(r, "aws_bedrock_runtime_endpoint", &["AWS_BEDROCK_RUNTIME_ENDPOINT"])
                .map(|e| e.trim_end_matches('/').to_string());
            let access_key_id = given(r, "aws_access_key_id", &["AWS_ACCESS_KEY_ID"]);
            let secret = given(r, "aws_secret_access_key", &["AWS_SECRET_ACCESS_KEY"]);
            let session_token = given(r, "aws_session_token", &["AWS_SESSION_TOKEN"]).map(Secret::new);
            let bearer = api_key.take().or_else(|| env(r, &["AWS_BEARER_TOKEN_BEDROCK"]).map(Secret::new));
            let auth = match (bearer, access_key_id, secret) {
                (Some(key), _, _) => AwsAuth::ApiKey(key),
                (None, Some(access_key_id), Some(s)) => {
                    AwsAuth::SigV4 { access_key_id, secret_access_key: Secret::new(s), session_token }
                }
                _ => {
                    r.error(node, format!("{}: a bedrock/ deployment needs `aws_access_key_id` and `aws_secret_access_key` (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or a Bedrock API key in `api_key` (or AWS_BEARER_TOKEN_BEDROCK)", p.path));
                    return Cloud::None;
                }
            };
            Cloud::Bedrock(Bedrock { region, runtime_endpoint, auth })
        }
        _ => {
            for (key, _) in CLOUD_KEYS {
                if let Some(n) = p.get(key) {
                    let msg = format!("{}: `{key}` is for azure/, vertex_ai/ and bedrock/ deployments", p.child(key));
                    r.warn(n, msg);
                }
            }
            Cloud::None
        }
    }
}

/// The first of the environment variables `names` that is set and not empty.
fn env(r: &Reader, names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| r.env_var(name).filter(|v| !v.is_empty()))
}

/// The service account of `text`: the key file's JSON itself (it starts with `{`), else the path of the file
/// (relative to the config file's directory).
fn service_account(r: &mut Reader, node: &Node, p: &Fields, text: &str, base: Option<&Path>) -> Option<ServiceAccount> {
    let at = p.get("vertex_credentials").unwrap_or(node);
    let (json, from) = if text.trim_start().starts_with('{') {
        (text.to_string(), "the JSON given".to_string())
    } else {
        let path = match base {
            Some(base) if Path::new(text).is_relative() => base.join(text),
            _ => Path::new(text).to_path_buf(),
        };
        match std::fs::read_to_string(&path) {
            Ok(json) => (json, format!("`{}`", path.display())),
            Err(e) => {
                r.error(at, format!("{}: cannot read `{}`: {e}", p.child("vertex_credentials"), path.display()));
                return None;
            }
        }
    };
    // A key file is JSON, which is YAML: the YAML reader parses it without another dependency.
    match serde_saphyr::from_str::<ServiceAccount>(&json) {
        Ok(a) if a.private_key.expose().contains("PRIVATE KEY-----") => Some(a),
        Ok(_) => {
            r.error(at, format!("{}: {from}: `private_key` is not a PEM private key", p.child("vertex_credentials")));
            None
        }
        Err(_) => {
            let msg = format!(
                "{}: {from} is not a service account's key file (JSON with `client_email` and `private_key`)",
                p.child("vertex_credentials")
            );
            r.error(at, msg);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::tests::load;
    use crate::{Config, ConfigError};

    fn entry(params: &str) -> String {
        format!("model_list:\n  - model_name: m\n    params: {{{params}}}\n")
    }

    fn cloud_of(params: &str, env: &[(&str, &str)]) -> Result<Cloud, Vec<String>> {
        match load(&entry(params), env) {
            Ok(Config { models, .. }) => Ok(models[0].cloud.clone()),
            Err(ConfigError::Invalid { diagnostics }) => Err(diagnostics.iter().map(|d| d.to_string()).collect()),
            Err(e) => Err(vec![e.to_string()]),
        }
    }

    #[test]
    fn azure_takes_litellm_names_and_the_azure_variables() {
        let c = cloud_of("model: azure/gpt-4o, api_base: 'https://r.openai.azure.com', api_key: k", &[]);
        assert!(
            matches!(c, Ok(Cloud::Azure(Azure { ref api_version, ad_token: None })) if api_version == AZURE_DEFAULT_API_VERSION)
        );
        let env = [
            ("AZURE_API_BASE", "https://r.openai.azure.com"),
            ("AZURE_AD_TOKEN", "t"),
            ("AZURE_API_VERSION", "2025-04-01-preview"),
        ];
        let c = cloud_of("model: azure/gpt-4o", &env);
        assert!(
            matches!(c, Ok(Cloud::Azure(Azure { ref api_version, ad_token: Some(_) })) if api_version == "2025-04-01-preview"),
            "{c:?}"
        );
        let errors = cloud_of("model: azure/gpt-4o", &[]).err().unwrap_or_default().join("\n");
        assert!(
            errors.contains("svc.yaml:3:13: model_list[0].params: an azure/ deployment needs `api_key`")
                && errors.contains("needs `api_base`"),
            "{errors}"
        );
    }

    #[test]
    fn vertex_reads_the_service_account_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let account = r#"{"type":"service_account","project_id":"p1","private_key_id":"k","private_key":"-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n","client_email":"a@p1.iam.gserviceaccount.com","token_uri":"https://oauth2.googleapis.com/token"}"#;
        let file = dir.path().join("sa.json");
        std::fs::write(&file, account).unwrap_or_else(|e| panic!("{e}"));
        let path = file.display().to_string();
        let c = cloud_of(&format!("model: vertex_ai/gemini-2.5-pro, vertex_credentials: '{path}'"), &[]);
        let Ok(Cloud::Vertex(v)) = c else { panic!("{c:?}") };
        assert_eq!(
            (v.project.as_str(), v.location.as_str(), v.account.client_email.as_str()),
            ("p1", "us-central1", "a@p1.iam.gserviceaccount.com")
        );
        assert!(v.account.private_key.expose().starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let env = [("SA", account), ("VERTEXAI_LOCATION", "global")];
        let c =
            cloud_of("model: vertex_ai/claude-sonnet-4, vertex_credentials: os.environ/SA, vertex_project: p2", &env);
        assert!(
            matches!(c, Ok(Cloud::Vertex(Vertex { ref project, ref location, .. })) if project == "p2" && location == "global"),
            "{c:?}"
        );
        let c = cloud_of("model: vertex_ai/gemini-2.5-pro", &[("GOOGLE_APPLICATION_CREDENTIALS", &path)]);
        assert!(matches!(c, Ok(Cloud::Vertex(_))), "{c:?}");

        std::fs::write(&file, r#"{"client_email": "a"}"#).unwrap_or_else(|e| panic!("{e}"));
        let errors = cloud_of(&format!("model: vertex_ai/g, vertex_credentials: '{path}'"), &[])
            .err()
            .unwrap_or_default()
            .join("\n");
        assert!(errors.contains("is not a service account's key file"), "{errors}");
        assert!(!errors.contains("PRIVATE KEY"), "{errors}");
        let errors =
            cloud_of("model: vertex_ai/g, vertex_credentials: no-such.json", &[]).err().unwrap_or_default().join("\n");
        assert!(
            errors.contains("vertex_credentials: cannot read `") && errors.contains("no-such.json`: No such file"),
            "{errors}"
        );
        let errors = cloud_of("model: vertex_ai/g", &[]).err().unwrap_or_default().join("\n");
        assert!(errors.contains("needs `vertex_credentials`"), "{errors}");
    }

    #[test]
    fn bedrock_signs_with_the_aws_variables_or_takes_an_api_key() {
        let env = [
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "AKIA1"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("AWS_SESSION_TOKEN", "t"),
        ];
        let c = cloud_of("model: 'bedrock/meta.llama3-70b-instruct-v1:0'", &env);
        let Ok(Cloud::Bedrock(b)) = c else { panic!("{c:?}") };
        assert_eq!((b.region.as_str(), b.runtime_endpoint.as_deref()), ("eu-west-1", None));
        assert!(
            matches!(b.auth, AwsAuth::SigV4 { ref access_key_id, session_token: Some(_), .. } if access_key_id == "AKIA1")
        );
        let c = cloud_of(
            "model: bedrock/x, aws_region_name: us-east-1, api_key: ABSK, aws_bedrock_runtime_endpoint: 'http://h:1/'",
            &[],
        );
        let Ok(Cloud::Bedrock(b)) = c else { panic!("{c:?}") };
        assert!(matches!(b.auth, AwsAuth::ApiKey(_)));
        assert_eq!(b.runtime_endpoint.as_deref(), Some("http://h:1"));
        let errors = cloud_of("model: bedrock/x", &[]).err().unwrap_or_default().join("\n");
        assert!(errors.contains("needs `aws_region_name`"), "{errors}");
        let errors = cloud_of("model: bedrock/x, aws_region_name: us-east-1", &[]).err().unwrap_or_default().join("\n");
        assert!(errors.contains("needs `aws_access_key_id`"), "{errors}");
    }

    #[test]
    fn cloud_keys_elsewhere_are_warned_about() {
        let c = load(&entry("model: openai/gpt-4o, api_version: '2024-10-21'"), &[]).unwrap_or_else(|e| panic!("{e}"));
        let warnings: Vec<String> = c.warnings.iter().map(|d| d.to_string()).collect();
        assert!(warnings.iter().any(|w| w.contains("`api_version` is for azure/")), "{warnings:?}");
    }
}
