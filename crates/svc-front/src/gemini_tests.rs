use super::*;

fn chat(v: Value) -> Value {
    let body = with_path_fields(v.to_string().as_bytes(), "gem", true).unwrap_or_default();
    to_chat(&body).map(|(chat, _)| Value::Object(chat)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn gemini_cli_shaped_requests_translate() {
    let out = chat(json!({
        "contents": [
            {"role": "user", "parts": [{"text": "<session_context>…</session_context>"}, {"text": "read /w/hello.txt"}]},
            {"role": "model", "parts": [{"text": "thinking", "thought": true}, {"functionCall": {"name": "read_file", "args": {"file_path": "/w/hello.txt"}}, "thoughtSignature": "sig"}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "read_file", "response": {"output": "pelican"}}}]}
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are Gemini CLI."}]},
        "tools": [{"functionDeclarations": [
            {"name": "read_file", "description": "reads", "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
            {"name": "old_style", "parameters": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}}
        ]}, {"googleSearch": {}}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read_file"]}},
        "generationConfig": {"temperature": 1, "topP": 0.95, "topK": 64, "maxOutputTokens": 900, "stopSequences": ["END"],
            "thinkingConfig": {"includeThoughts": true}},
        "model": "client-says-otherwise"
    }));
    assert_eq!(
        (out["model"].clone(), out["stream"].clone()),
        (json!("gem"), json!(true)),
        "the path's, not the body's"
    );
    assert_eq!(out["messages"][0], json!({"role": "system", "content": "You are Gemini CLI."}));
    assert_eq!(out["messages"][1]["content"][1]["text"], "read /w/hello.txt");
    let call = &out["messages"][2]["tool_calls"][0];
    assert_eq!(call["function"], json!({"name": "read_file", "arguments": "{\"file_path\":\"/w/hello.txt\"}"}));
    assert_eq!(out["messages"][2]["content"], Value::Null, "the thought is not sent back");
    assert_eq!(out["messages"][3], json!({"role": "tool", "tool_call_id": call["id"], "content": "pelican"}));
    assert_eq!(out["tools"].as_array().map(Vec::len), Some(2), "Google Search is Google's alone");
    assert_eq!(
        out["tools"][1]["function"]["parameters"],
        json!({"type": "object", "properties": {"n": {"type": "integer"}}})
    );
    assert_eq!(out["tool_choice"], json!({"type": "function", "function": {"name": "read_file"}}));
    assert_eq!(
        (out["max_tokens"].clone(), out["top_p"].clone(), out["stop"].clone()),
        (json!(900), json!(0.95), json!(["END"]))
    );
    assert!(out.get("topK").is_none() && out.get("top_k").is_none());
}

#[test]
fn bad_requests_name_the_field() {
    for (body, param) in [
        (json!({}), "contents"),
        (json!({"contents": []}), "contents"),
        (json!({"contents": [{"role": "user"}]}), "contents[0].parts"),
        (json!({"contents": [{"role": "robot", "parts": []}]}), "contents[0].role"),
    ] {
        let raw = with_path_fields(body.to_string().as_bytes(), "g", false).unwrap_or_default();
        assert_eq!(to_chat(&raw).err().and_then(|e| e.param).as_deref(), Some(param), "{body}");
    }
    assert!(with_path_fields(b"[1]", "g", false).is_err());
    assert!(with_path_fields(b" {} ", "g", false).is_ok());
}

#[test]
fn paths_name_model_and_method() {
    assert_eq!(
        model_and_method("gemini-2.5-pro:streamGenerateContent"),
        Some(("gemini-2.5-pro", Method::StreamGenerate))
    );
    assert_eq!(model_and_method("models/g:countTokens"), Some(("g", Method::CountTokens)));
    assert_eq!(model_and_method("team/g:embedContent"), Some(("team/g", Method::Embed)));
    assert_eq!(model_and_method("g:predict"), None);
    assert_eq!(model_and_method(":generateContent"), None);
    assert!(is_gemini_path("/v1beta/models/g:generateContent") && is_gemini_path("/v1/models/g:countTokens"));
    assert!(!is_gemini_path("/v1/models") && !is_gemini_path("/v1/chat/completions"));
}

#[test]
fn completions_become_generate_content_responses() {
    let completion = json!({"id": "chatcmpl-1", "model": "gem", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "Reading.", "reasoning_content": "hm",
            "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"file_path\":\"a\"}"}}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 40},
            "completion_tokens_details": {"reasoning_tokens": 10}}});
    let out = Value::Object(from_completion(completion.as_object().unwrap_or(&Map::new())));
    assert_eq!(
        out["candidates"][0]["content"]["parts"],
        json!([{"text": "hm", "thought": true}, {"text": "Reading."},
            {"functionCall": {"id": "call_1", "name": "read_file", "args": {"file_path": "a"}}}])
    );
    assert_eq!(out["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        out["usageMetadata"],
        json!({"promptTokenCount": 100, "candidatesTokenCount": 20, "thoughtsTokenCount": 10,
            "cachedContentTokenCount": 40, "totalTokenCount": 130})
    );
    assert_eq!(out["modelVersion"], "gem");
}

#[test]
fn errors_are_googles_and_a_budget_refusal_tells_when_to_retry() {
    let fault = Fault { status: 429, code: "budget_exceeded", message: "Budget exceeded", retry_after: Some(86_400) };
    let body = error_body(&fault);
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
    assert_eq!(body["error"]["code"], 429);
    assert_eq!(
        body["error"]["details"],
        json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "86400s"}])
    );
    let body = error_body(&Fault { status: 404, code: "not_found_error", message: "no", retry_after: None });
    assert_eq!((body["error"]["status"].clone(), body["error"]["details"].clone()), (json!("NOT_FOUND"), json!([])));
}

#[test]
fn a_conversation_is_named_by_its_first_turn() {
    let first = json!({"role": "user", "parts": [{"text": "<session_context>/w</session_context>"}, {"text": "hi"}]});
    let one = json!({"contents": [first]}).to_string();
    let two = json!({"contents": [first, {"role": "model", "parts": [{"text": "hello"}]}, {"role": "user", "parts": [{"text": "more"}]}]}).to_string();
    let other = json!({"contents": [{"role": "user", "parts": [{"text": "something else"}]}]}).to_string();
    let (a, b, c) = (session_of(one.as_bytes()), session_of(two.as_bytes()), session_of(other.as_bytes()));
    assert!(a.as_deref().is_some_and(|s| s.starts_with("gemini-") && s.len() == 23), "{a:?}");
    assert_eq!(a, b, "later turns of one conversation");
    assert_ne!(a, c);
    assert_eq!(session_of(b"{}"), None);
}
