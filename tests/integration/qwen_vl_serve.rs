//! A Qwen-VL checkpoint behind `guirl serve-policy`: the answer is what the model wrote,
//! in its own coordinate frame, which `/v1/models` names and guirl's `openai:` policy
//! reads by itself; so an answer with no action in it stays an invalid step (it became
//! `done()`), the log-probs spell the content, and episodes through the API are the
//! episodes run directly. The tiny random Qwen3-VL answers mostly nonsense, which is the
//! point: both kinds of answer occur.

use crate::common::{self, qwen};
use guirl::bench::harness;
use guirl::env::EnvConfig;
use guirl::policy::api::client::Endpoint;
use guirl::policy::api::coords::CoordMode;
use guirl::policy::api::{ApiConfig, ApiPolicy};
use guirl::policy::qwen_vl::QwenVlPolicy;
use guirl::policy::{Policy, TrainablePolicy};
use serde_json::{json, Value};
use std::time::Duration;

fn api(base: &str, coords: Option<CoordMode>) -> anyhow::Result<ApiPolicy> {
    ApiPolicy::new(ApiConfig {
        model: "qwen".into(),
        endpoint: Endpoint {
            base_url: base.into(),
            api_key: None,
            timeout: Duration::from_secs(60),
            retries: 0,
            backoff: Duration::from_millis(50),
        },
        prompt_file: None,
        images: 1,
        coords,
        temperature: 0.0,
        max_tokens: 64,
        seed: 0,
        extra_body: None,
        elements: false,
        concurrency: 2,
    })
}

#[test]
fn a_served_qwen_answers_in_its_own_words_and_frame_and_acts_as_it_does_directly() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let direct_policy = QwenVlPolicy::new(qwen::policy_settings("qwen3_vl", dir.path()), &candle_core::Device::Cpu, 5).unwrap();
        qwen::perturb_b(&direct_policy);
        let ckpt = dir.path().join("ckpt");
        direct_policy.save(&ckpt).unwrap();
        let served = QwenVlPolicy::load_dir(&ckpt, &candle_core::Device::Cpu).unwrap();
        let frame = served.answer_frame();
        assert_eq!(frame, CoordMode::Rel1000, "Qwen3-VL answers in 0..1000");
        let router = guirl::serve::policy_server::router(
            Box::new(served),
            "qwen".into(),
            guirl::policy::observation::Observation::Pixels,
            Default::default(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

        // /v1/models names the frame; the client takes it, and refuses another one asked for.
        let ep = Endpoint {
            base_url: base.clone(),
            api_key: None,
            timeout: Duration::from_secs(60),
            retries: 0,
            backoff: Duration::from_millis(10),
        };
        let models = { let ep = ep.clone(); std::thread::spawn(move || ep.models()).join().unwrap().unwrap() };
        assert_eq!(models[0].coordinates, Some(CoordMode::Rel1000));
        let b = base.clone();
        let wrong = std::thread::spawn(move || api(&b, Some(CoordMode::Px)).err()).join().unwrap().unwrap();
        assert!(format!("{wrong:#}").contains("answers in the rel1000 frame; --coords px would misread"), "{wrong:#}");

        // One request: the content is the model's answer, its log-probs spell it, and a
        // token limit cuts it as decoding would have.
        let mut direct = QwenVlPolicy::load_dir(&ckpt, &candle_core::Device::Cpu).unwrap();
        let mut s = direct.sampling();
        s.greedy = true;
        direct.set_sampling(s);
        let mut env = guirl::env::GuiEnv::new(guirl::tasks::load_task("miniwob/click-test").unwrap(), EnvConfig::default());
        let (state, _) = env.reset(1_000_003).await.unwrap();
        env.close().await;
        let d = direct.act(std::slice::from_ref(&state)).unwrap().remove(0);
        let png = guirl::env::encode_png(&state.screenshot);
        use base64::Engine;
        let url = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png));
        let text = guirl::policy::api::prompt::user_text(&state, &[], false);
        let ask = |extra: Value| {
            let mut body = json!({"model": "qwen", "temperature": 0, "logprobs": true, "messages": [{"role": "user",
                "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}]});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let ep = ep.clone();
            std::thread::spawn(move || ep.call("chat/completions", Some(&body))).join().unwrap().unwrap()
        };
        let v = ask(json!({}));
        let choice = &v["choices"][0];
        assert_eq!(choice["message"]["content"].as_str(), d.answer.as_deref(), "{v}");
        let spelled: String = choice["logprobs"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["token"].as_str().unwrap())
            .filter(|t| *t != "<|im_end|>")
            .collect();
        assert_eq!(Some(spelled.as_str()), d.answer.as_deref());
        let stopped = d.tokens.last() == direct.model().chat.token_id("<|im_end|>").as_ref();
        assert_eq!(choice["finish_reason"], if stopped { "stop" } else { "length" });
        assert_eq!(v["usage"]["prompt_tokens"].as_u64(), Some(direct.prompt_tokens(&state).unwrap() as u64));
        let cut = ask(json!({"max_tokens": 2}));
        let choice = &cut["choices"][0];
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(choice["logprobs"]["content"].as_array().unwrap().len(), 2);
        let first_two = direct.answer_text(&d.tokens[..2]).unwrap().unwrap();
        assert_eq!(choice["message"]["content"].as_str(), Some(first_two.as_str()));
        assert_eq!(cut["usage"]["completion_tokens"], 2);

        // Episodes through the API are the episodes run directly, invalid steps included.
        let tasks = ["miniwob/click-test", "miniwob/click-button"];
        let env = EnvConfig { max_steps: Some(3), ..EnvConfig::default() };
        let opts = |name: &str| common::bench_options(&tasks, 3, 2, &dir.path().join(name), env.clone());
        harness::run(&opts("direct"), &mut direct).await.unwrap();
        let b = base.clone();
        let mut through = std::thread::spawn(move || api(&b, None)).join().unwrap().unwrap();
        let report = harness::run(&opts("api"), &mut through).await.unwrap();
        assert_eq!(report.all.policy_errors, 0);
        let (a, b) = (common::bench_episodes(&dir.path().join("direct")), common::bench_episodes(&dir.path().join("api")));
        assert_eq!(a.len(), 6);
        let invalid = a.iter().flat_map(|e| &e.4).filter(|s| s.1.is_some()).count();
        assert!(invalid > 0, "some answers hold no action: {a:?}");
        assert_eq!(a, b, "the same outcomes and steps, episode by episode");
    });
}
