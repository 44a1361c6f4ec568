//! The schedule form in a real browser: a new form opens with nothing marked wrong; the
//! preview shows the next fires in the schedule's own zone, named, and the cron in words;
//! the "Advanced" section's environment, policies and follow-ups are created through the
//! form, their API errors sit next to their controls, and saving an untouched edit leaves
//! the stored spec and its revision as they were. What is asserted about storage is read
//! back through studiod's API.

// WebDriver script arguments and results are JSON values: the browser's protocol.
use serde_json::json;
use studio_api::{
    Schedule, SchedulePage,
    schedule::{
        Action, CronTrigger, FollowUp, MissedFire, Overlap, Policies, RateLimit, ScheduleSpec,
        Trigger,
    },
};
use studio_tests::{
    Reply, Studio,
    api::{command, env},
    browser::Browser,
};

use crate::cockpit::{Api, WAIT, open, paired_browser, start};

/// A schedule as studiod serves it, by id (the daemon token as bearer).
async fn schedule(studio: &Studio, id: &str) -> Schedule {
    let url = studio.daemon_url(&format!("/api/schedules/{id}"));
    Reply::of(crate::get_with_token(studio, &url).await)
        .await
        .expect(200)
}

/// Every schedule studiod holds.
async fn schedules(studio: &Studio) -> Vec<Schedule> {
    let url = studio.daemon_url("/api/schedules");
    Reply::of(crate::get_with_token(studio, &url).await)
        .await
        .expect::<SchedulePage>(200)
        .schedules
}

fn follow_up(action: Action) -> Option<Box<FollowUp>> {
    Some(Box::new(FollowUp {
        action,
        on_success: None,
        on_fail: None,
    }))
}

/// Whether the element with `data-testid="<error>"` sits in the same field box as the
/// control `data-testid="<control>"`, and that control is marked invalid.
async fn error_beside(browser: &Browser, error: &str, control: &str) -> bool {
    let found = browser
        .execute(
            r#"const [error, control] = arguments;
               const e = document.querySelector(`[data-testid="${error}"]`);
               const box = e && e.closest('.field');
               const c = box && box.querySelector(`[data-testid="${control}"]`);
               return !!c && c.getAttribute('aria-invalid') === 'true'
                 && (c.getAttribute('aria-describedby') || '').split(' ').includes(e.id);"#,
            vec![json!(error), json!(control)],
        )
        .await;
    found == json!(true)
}

async fn advanced_is_open(browser: &Browser) -> bool {
    browser.attr("advanced", "open").await.is_some()
}

/// A field's current value.
async fn value_of(browser: &Browser, testid: &str) -> String {
    browser
        .find(testid)
        .await
        .prop("value")
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// The form's controls marked invalid (by name) and the error texts it shows.
async fn marked_wrong(browser: &Browser) -> serde_json::Value {
    browser
        .execute(
            r#"const form = document.getElementById('schedule-form');
               const all = (css) => Array.from(form.querySelectorAll(css));
               return {
                 invalid: all('[aria-invalid="true"]').map((e) => e.name),
                 errors: all('.field-error, [data-error-for="form"]:not([hidden])')
                   .map((e) => e.textContent),
               };"#,
            vec![],
        )
        .await
}

/// The previewed fires as the page shows them: each one's text, its `datetime`, and the
/// viewer's-time note beside it (empty when there is none).
async fn previewed(browser: &Browser) -> Vec<(String, String, String)> {
    let fires = browser
        .execute(
            r#"return Array.from(document.querySelectorAll('[data-testid="preview-list"] li'))
                 .map((li) => {
                   const t = li.querySelector('[data-testid="preview-fire"]');
                   const note = li.querySelector('[data-testid="preview-fire-local"]');
                   return [t ? t.textContent : '', t ? t.getAttribute('datetime') : '',
                           note ? note.textContent : ''];
                 });"#,
            vec![],
        )
        .await;
    serde_json::from_value(fires).expect("a list of fires")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preview_is_in_the_schedules_zone_with_the_cron_in_words() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    // The preview of the empty cron is answered (the daemon refuses it) before anything
    // is judged; nobody has typed, so nothing is marked.
    browser
        .wait_for_attr("preview", "aria-busy", &["false"], WAIT)
        .await;
    assert_eq!(
        marked_wrong(&browser).await,
        json!({"invalid": [], "errors": []}),
        "a new form opens with nothing marked wrong"
    );

    browser.fill("field-trigger-kind", "cron").await;
    browser.fill("field-cron", "0 9 * * *").await;
    browser.fill("field-timezone", "America/Sao_Paulo").await;
    browser
        .wait_until(WAIT, "five fires named in America/Sao_Paulo", || async {
            let fires = previewed(&browser).await;
            fires.len() == 5 && fires.iter().all(|f| f.0.contains("America/Sao_Paulo"))
        })
        .await;
    let viewer = browser
        .execute(
            "return Intl.DateTimeFormat().resolvedOptions().timeZone",
            vec![],
        )
        .await;
    let viewer = viewer.as_str().expect("the browser's zone").to_owned();
    let viewer_tz = jiff::tz::TimeZone::get(&viewer).expect("an IANA zone");
    for (text, datetime, note) in previewed(&browser).await {
        assert!(
            text.contains(", 09:00 America/Sao_Paulo"),
            "the fire reads on the schedule's wall clock: {text:?}"
        );
        assert!(!text.contains("12:00"), "not in UTC: {text:?}");
        assert!(datetime.ends_with("T09:00:00-03:00"), "{datetime:?}");
        // The viewer's own time rides beside it whenever it reads differently.
        let here = datetime
            .parse::<jiff::Timestamp>()
            .expect("an instant")
            .to_zoned(viewer_tz.clone())
            .strftime("%H:%M")
            .to_string();
        if here == "09:00" {
            assert_eq!(note, "", "{text:?}");
        } else {
            assert!(note.contains(&format!("{here} {viewer}")), "{note:?}");
        }
    }
    browser
        .wait_for_text("cron-words", "every day at 09:00 America/Sao_Paulo", WAIT)
        .await;

    // Day-of-month and day-of-week both set: the words say either day fires.
    browser.fill("field-cron", "0 9 1 */3 MON-FRI").await;
    browser
        .wait_for_text(
            "cron-words",
            "on day 1 of the month and every Monday through Friday at 09:00 \
             America/Sao_Paulo, in January, April, July and October",
            WAIT,
        )
        .await;
    assert_eq!(
        marked_wrong(&browser).await,
        json!({"invalid": [], "errors": []})
    );

    // Typed into, a field is judged: a wrong cron is marked, and its words go.
    browser.fill("field-cron", "61 * * * *").await;
    browser.wait_for_testid("error-cron", WAIT).await;
    assert!(error_beside(&browser, "error-cron", "field-cron").await);
    assert_eq!(browser.text_of("cron-words").await.unwrap_or_default(), "");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_a_policy_and_a_follow_up_are_created_through_the_form() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.fill("field-name", "with-extras").await;
    browser.fill("field-cron", "30 2 * * *").await;
    browser.fill("field-executable", "sh").await;
    browser.fill("field-args", "-c\necho \"$MODE\"").await;
    assert!(
        !advanced_is_open(&browser).await,
        "a new schedule starts calm"
    );
    browser.click("advanced-summary").await;
    browser
        .fill("field-env", "MODE=full\nGREETING=hello world")
        .await;
    browser.fill("field-overlap", "replace").await;
    browser.fill("field-deadline", "600").await;
    browser.fill("field-on-fail-kind", "command").await;
    browser.fill("field-on-fail-executable", "sh").await;
    browser.fill("field-on-fail-args", "-c\necho failed").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "with-extras", WAIT)
        .await;

    let all = schedules(&studio).await;
    assert_eq!(all.len(), 1, "{all:?}");
    let spec = &all[0].spec;
    assert_eq!(
        spec.env,
        env(&[("MODE", "full"), ("GREETING", "hello world")])
    );
    assert_eq!(
        spec.policies,
        Policies {
            missed_fire: MissedFire::Skip,
            overlap: Overlap::Replace,
            deadline: Some(600),
            ..Policies::default()
        },
        "untouched policies stay at their defaults"
    );
    assert_eq!(
        spec.on_fail,
        follow_up(command("sh", &["-c", "echo failed"]))
    );
    assert!(spec.on_success.is_none(), "{spec:?}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_error_is_shown_next_to_its_control() {
    let studio = start();
    let browser = paired_browser(&studio).await;
    open(&browser, &studio, "/schedules/new", "schedule-form").await;
    browser.fill("field-name", "refused").await;
    browser.fill("field-cron", "30 2 * * *").await;
    browser.fill("field-executable", "reindex").await;
    browser.click("advanced-summary").await;
    browser.fill("field-deadline", "0").await;
    browser.fill("field-env", "STUDIO_RUN_ID=mine").await;
    // Closed again before saving: an error inside opens the section by itself.
    browser.click("advanced-summary").await;
    assert!(!advanced_is_open(&browser).await);
    browser.click("schedule-submit").await;

    let error = browser.wait_for_testid("error-deadline", WAIT).await;
    let message = error.text().await.expect("error text");
    assert!(message.contains("at least 1 second"), "{message:?}");
    assert!(
        error_beside(&browser, "error-deadline", "field-deadline").await,
        "the daemon's message sits in the deadline's box and describes it"
    );
    assert!(
        advanced_is_open(&browser).await,
        "the error opened its section"
    );
    let env = browser
        .wait_for_text("error-env", "STUDIO_RUN_ID", WAIT)
        .await;
    assert!(env.contains("runner"), "{env:?}");
    assert!(error_beside(&browser, "error-env", "field-env").await);
    // Off the allow-list: the exact command that allows it, beside the executable.
    let exe = browser
        .wait_for_text("error-executable", "studio allow add reindex", WAIT)
        .await;
    assert!(exe.contains("terminal"), "{exe:?}");
    assert!(error_beside(&browser, "error-executable", "field-executable").await);
    assert!(schedules(&studio).await.is_empty(), "nothing was created");

    // Half a rate limit is refused before anything is sent, next to the missing half.
    browser.fill("field-executable", "true").await;
    browser.fill("field-deadline", "600").await;
    browser.fill("field-env", "MODE=ok").await;
    browser.fill("field-max-fires", "3").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("error-window-seconds", "both", WAIT)
        .await;
    assert!(browser.try_find("error-deadline").await.is_none());
    assert!(error_beside(&browser, "error-window-seconds", "field-window-seconds").await);

    browser.fill("field-window-seconds", "60").await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "refused", WAIT)
        .await;
    let all = schedules(&studio).await;
    assert_eq!(
        all[0].spec.policies.rate_limit,
        Some(RateLimit {
            max_fires: 3,
            window_seconds: 60
        })
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saving_an_untouched_edit_keeps_the_spec_and_its_revision() {
    let studio = start();
    let api = Api::new(&studio);
    // Every field set, some in ways the form would not write them (padded arguments, a
    // chain below the follow-up): untouched, each must survive as stored.
    let id = api
        .create(&ScheduleSpec {
            target: None,
            name: Some("everything".into()),
            description: "all fields".into(),
            enabled: true,
            trigger: Trigger::Cron(CronTrigger {
                expression: "0 3 * * *".into(),
                timezone: Some("Europe/Berlin".into()),
            }),
            action: command("sh", &["-c", " echo  padded "]),
            cwd: Some("/tmp".into()),
            env: env(&[("MODE", "full"), ("PADDED", " kept "), ("QUERY", "a=b")]),
            secrets: Default::default(),
            notify: Vec::new(),
            policies: Policies {
                missed_fire: MissedFire::RunOnce,
                overlap: Overlap::Allow,
                max_runs: Some(5),
                deadline: Some(600),
                budget_usd: Some(2.5),
                rate_limit: Some(RateLimit {
                    max_fires: 3,
                    window_seconds: 60,
                }),
                ..Policies::default()
            },
            on_success: Some(Box::new(FollowUp {
                action: Action::Agent {
                    prompt: "summarise".into(),
                    model: Some("large".into()),
                    profile: Some("ops".into()),
                },
                on_success: None,
                on_fail: follow_up(command("false", &[])),
            })),
            on_fail: follow_up(command("true", &["failed"])),
        })
        .await;
    let before = schedule(&studio, &id).await;
    let browser = paired_browser(&studio).await;
    let edit = format!("/schedules/{id}/edit");

    open(&browser, &studio, &edit, "schedule-form").await;
    assert!(advanced_is_open(&browser).await, "set fields are on show");
    assert_eq!(value_of(&browser, "field-deadline").await, "600");
    assert_eq!(value_of(&browser, "field-overlap").await, "allow");
    assert_eq!(value_of(&browser, "field-on-success-model").await, "large");
    browser.wait_for_testid("on-success-chain", WAIT).await;
    browser.click("schedule-submit").await;
    browser
        .wait_for_text("schedule-name", "everything", WAIT)
        .await;
    let after = schedule(&studio, &id).await;
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.revision, before.revision, "nothing was written");

    // One field changed and one cleared: only they move; the rest stays as stored.
    open(&browser, &studio, &edit, "schedule-form").await;
    browser.fill("field-description", "edited").await;
    browser.fill("field-deadline", "").await;
    browser.click("schedule-submit").await;
    browser
        .wait_until(WAIT, "the saved schedule's page", || async {
            browser
                .current_url()
                .await
                .ends_with(&format!("/schedules/{id}"))
        })
        .await;
    browser
        .wait_for_text("schedule-name", "everything", WAIT)
        .await;
    let edited = schedule(&studio, &id).await;
    let mut want = before.spec.clone();
    want.description = "edited".into();
    want.policies.deadline = None;
    assert_eq!(edited.spec, want);
    assert_eq!(edited.revision, before.revision + 1);
    browser.close().await;
}
