//! `POST /api/schedules/preview` through the real router: the fires in the trigger's
//! zone, and the trigger in the same words the cockpit's pages use.

use http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::{api, authed};
use crate::testing::DAEMON_TOKEN;

async fn preview(body: Value) -> Value {
    let request = authed(Method::POST, "/api/schedules/preview", DAEMON_TOKEN)
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .expect("request");
    let (status, _, answer) = api().await.send(request).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

#[tokio::test]
async fn a_preview_says_its_trigger_in_words() {
    // Day-of-month and day-of-week both set: either day fires, and the words say so.
    let answer = preview(json!({
        "trigger": {"cron": {"expression": "0 9 1 */3 MON-FRI", "timezone": "America/Sao_Paulo"}},
        "count": 3,
        "from": "2026-12-01T00:00:00Z",
    }))
    .await;
    assert_eq!(
        answer,
        json!({
            "fires": [
                "2027-01-01T09:00:00-03:00",
                "2027-01-04T09:00:00-03:00",
                "2027-01-05T09:00:00-03:00",
            ],
            "timezone": "America/Sao_Paulo",
            "description": "on day 1 of the month and every Monday through Friday at 09:00 \
                            America/Sao_Paulo, in January, April, July and October",
        })
    );

    // No zone of its own: the daemon's (UTC here), named in the answer.
    let answer = preview(json!({"trigger": {"cron": {"expression": "0 9 * * 1-5"}}})).await;
    assert_eq!(answer["timezone"], "UTC");
    assert_eq!(
        answer["description"],
        "every Monday through Friday at 09:00 UTC"
    );

    let answer = preview(json!({"trigger": {"every": "15m"}})).await;
    assert_eq!(answer["timezone"], Value::Null);
    assert_eq!(answer["description"], "every 15m");
}
