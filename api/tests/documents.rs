//! The checked-in OpenAPI documents are what the code writes: `docs/openapi.json` from
//! studiod's inventory, `docs/openapi-app.json` from studio-app's. Regenerate with `STUDIO_BLESS=1 cargo test -p studio-api --test
//! documents` after changing a route or a body type, and commit the result.

use std::path::Path;

fn check(file: &str, text: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(file);
    if std::env::var_os("STUDIO_BLESS").is_some() {
        std::fs::write(&path, text).expect("write the document");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == text,
        "docs/{file} is not what the code generates: run \
         `STUDIO_BLESS=1 cargo test -p studio-api --test documents` and commit it"
    );
}

#[test]
fn studiod_document_is_checked_in() {
    check(
        "openapi.json",
        &studio_api::openapi::to_text(&studio_api::daemon_document()),
    );
}

#[test]
fn app_document_is_checked_in() {
    check(
        "openapi-app.json",
        &studio_api::openapi::to_text(&studio_api::app::app_document()),
    );
}

#[test]
fn no_app_route_shadows_a_forwarded_studiod_route() {
    let app: Vec<&str> = studio_api::app::APP_ROUTES.iter().map(|r| r.path).collect();
    assert_eq!(studio_api::app::shadowed(&app), None);
    assert!(
        studio_api::app::shadowed(&["/api/schedules/{id}"]).is_some(),
        "a colliding path is found"
    );
    assert!(studio_api::app::shadowed(&["/api/runs/{run}/log"]).is_some());
}

#[test]
fn every_route_is_in_the_document_with_its_codes() {
    let doc: serde_json::Value =
        serde_json::to_value(studio_api::daemon_document()).expect("document as JSON");
    let paths = doc.get("paths").and_then(|p| p.as_object()).expect("paths");
    let mut operations = 0;
    for route in studio_api::routes::ROUTES {
        let op = paths
            .get(route.path)
            .and_then(|item| item.get(route.method.as_str().to_ascii_lowercase()))
            .unwrap_or_else(|| panic!("{} {} missing", route.method.as_str(), route.path));
        assert_eq!(
            op.get("operationId").and_then(|v| v.as_str()),
            Some(route.id)
        );
        let responses = op
            .get("responses")
            .and_then(|r| r.as_object())
            .expect("responses");
        for code in route.codes() {
            let status = code.status().as_u16().to_string();
            let listed = responses
                .get(&status)
                .map(|r| r.to_string().contains(&format!("\"{}\"", code.as_str())))
                .unwrap_or(false);
            assert!(listed, "{} does not list {code} under {status}", route.id);
        }
        operations += 1;
    }
    let in_doc: usize = paths
        .values()
        .map(|item| item.as_object().map_or(0, |o| o.len()))
        .sum();
    assert_eq!(
        in_doc, operations,
        "the document names an operation no route has"
    );
}
