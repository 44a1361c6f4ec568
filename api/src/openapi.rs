//! The OpenAPI 3.1 document of a listener, written from its route inventory: each route's
//! method and path, its query and path parameters, its body and answer schemas (derived
//! from the types with `utoipa`), and every error code it can answer with, grouped by
//! status. `docs/openapi.json` is this for studiod's [`crate::routes::ROUTES`].

use std::collections::BTreeMap;

use studio_contract::{
    VERSION,
    error::{Code, ErrorBody},
};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        ComponentsBuilder, Content, InfoBuilder, OpenApi, OpenApiBuilder, PathItem, Paths, Ref,
        RefOr, Required, ResponseBuilder, Responses,
        path::{HttpMethod, OperationBuilder, ParameterBuilder, ParameterIn},
        request_body::RequestBodyBuilder,
        schema::{AllOfBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type},
        security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme},
    },
};

use crate::route::{Access, Decides, Gives, Kind, Method, Param, Route, Takes, path_params};

const BEARER: &str = "bearer";

/// The document for `routes`, titled `title`.
pub fn document<O>(title: &str, about: &str, routes: &[Route<O>]) -> OpenApi {
    let mut schemas: Vec<(String, RefOr<Schema>)> = Vec::new();
    schemas.push((ErrorBody::name().into_owned(), ErrorBody::schema()));
    <ErrorBody as ToSchema>::schemas(&mut schemas);
    let mut paths: BTreeMap<&str, PathItem> = BTreeMap::new();
    for route in routes {
        let operation = operation(route, &mut schemas);
        let item = PathItem::new(http_method(route.method), operation);
        match paths.get_mut(route.path) {
            Some(existing) => existing.merge_operations(item),
            None => {
                paths.insert(route.path, item);
            }
        }
    }
    let mut all = Paths::new();
    for (path, item) in paths {
        all.paths.insert(path.to_owned(), item);
    }
    // One entry per name (a type reached twice is the same schema).
    let schemas: BTreeMap<String, RefOr<Schema>> = schemas.into_iter().collect();
    let components = ComponentsBuilder::new()
        .schemas_from_iter(schemas)
        .security_scheme(
            BEARER,
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        )
        .build();
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title(title)
                .version(VERSION)
                .description(Some(about)),
        )
        .paths(all)
        .components(Some(components))
        .build()
}

/// The document as checked in: pretty JSON with a final newline.
pub fn to_text(doc: &OpenApi) -> String {
    let mut text = doc.to_pretty_json().unwrap_or_default();
    text.push('\n');
    text
}

fn http_method(m: Method) -> HttpMethod {
    match m {
        Method::Get => HttpMethod::Get,
        Method::Post => HttpMethod::Post,
        Method::Put => HttpMethod::Put,
        Method::Patch => HttpMethod::Patch,
        Method::Delete => HttpMethod::Delete,
    }
}

fn schema_ref(name: &str) -> RefOr<Schema> {
    Ref::from_schema_name(name).into()
}

fn operation<O>(
    route: &Route<O>,
    schemas: &mut Vec<(String, RefOr<Schema>)>,
) -> utoipa::openapi::path::Operation {
    let mut op = OperationBuilder::new()
        .operation_id(Some(route.id))
        .summary(Some(route.summary));
    if route.access == Access::Bearer {
        let decision = match route.decides {
            Decides::No => "",
            Decides::Destructive => {
                " From a browser it also needs the session's decision token \
                 (`x-studio-decision-token`)."
            }
            Decides::Human => {
                " Only a person decides: it needs a paired browser's decision token \
                 (`x-studio-decision-token`); the daemon token is refused."
            }
        };
        op = op.description(Some(format!(
            "A browser session needs the role `{}` or above.{decision}",
            route.needs.as_str()
        )));
    }
    for name in path_params(route.path) {
        op = op.parameter(
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Path)
                .required(Required::True)
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1)),
                )),
        );
    }
    for param in route.query {
        op = op.parameter(
            ParameterBuilder::new()
                .name(param.name)
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(param.about))
                .schema(Some(param_schema(param))),
        );
    }
    match route.takes {
        Takes::Nothing => {}
        Takes::Json(t) | Takes::MergePatch(t) => {
            t.collect(schemas);
            let about = match route.takes {
                Takes::MergePatch(_) => {
                    "a JSON merge patch (RFC 7396): fields to set, `null` to remove; \
                     `trigger`, `action`, `on_success` and `on_fail` are replaced whole"
                }
                _ => "the request",
            };
            let schema = match route.takes {
                // A patch names only what changes: any subset of the spec's fields.
                Takes::MergePatch(_) => ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .description(Some(format!("fields of {}", (t.name)())))
                    .into(),
                _ => schema_ref(&(t.name)()),
            };
            op = op.request_body(Some(
                RequestBodyBuilder::new()
                    .description(Some(about))
                    .required(Some(Required::True))
                    .content("application/json", Content::new(Some(schema)))
                    .build(),
            ));
        }
    }
    let mut responses = Responses::new();
    let (status, answer) = match route.gives {
        Gives::Json(status, t) => {
            t.collect(schemas);
            (
                status,
                ResponseBuilder::new().description(route.summary).content(
                    "application/json",
                    Content::new(Some(schema_ref(&(t.name)()))),
                ),
            )
        }
        Gives::Text => (
            200,
            ResponseBuilder::new().description(route.summary).content(
                "text/plain; charset=utf-8",
                Content::new(Some(ObjectBuilder::new().schema_type(Type::String))),
            ),
        ),
        Gives::Events(kinds) => {
            let mut about = format!("{}; each event's data is JSON:", route.summary);
            for (kind, t) in kinds {
                t.collect(schemas);
                about.push_str(&format!(" `{kind}` → `{}`;", (t.name)()));
            }
            about.pop();
            (
                200,
                ResponseBuilder::new().description(about).content(
                    "text/event-stream",
                    Content::new(Some(ObjectBuilder::new().schema_type(Type::String))),
                ),
            )
        }
        Gives::Document => (
            200,
            ResponseBuilder::new().description(route.summary).content(
                "application/json",
                Content::new(Some(ObjectBuilder::new().schema_type(Type::Object))),
            ),
        ),
    };
    responses
        .responses
        .insert(status.to_string(), answer.build().into());
    let mut by_status: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
    for code in route.codes() {
        by_status
            .entry(code.status().as_u16())
            .or_default()
            .push(code);
    }
    for (status, codes) in by_status {
        let words: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
        let schema = AllOfBuilder::new().item(schema_ref("ErrorBody")).item(
            ObjectBuilder::new().property(
                "code",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(words.clone())),
            ),
        );
        responses.responses.insert(
            status.to_string(),
            ResponseBuilder::new()
                .description(format!("`{}`", words.join("`, `")))
                .content("application/json", Content::new(Some(schema)))
                .build()
                .into(),
        );
    }
    op = op.responses(responses);
    if matches!(route.access, Access::Bearer | Access::DaemonToken) {
        op = op.security(SecurityRequirement::new::<_, _, &str>(BEARER, []));
    }
    op.build()
}

fn param_schema(param: &Param) -> RefOr<Schema> {
    match param.kind {
        Kind::String => ObjectBuilder::new().schema_type(Type::String).into(),
        Kind::Integer => ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .into(),
        Kind::Boolean => ObjectBuilder::new().schema_type(Type::Boolean).into(),
        Kind::Instant => ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .into(),
        Kind::OneOf(words) => ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(words.iter().copied()))
            .into(),
        Kind::ListOf(words) => ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!(
                "comma-separated, each one of: {}",
                words.join(", ")
            )))
            .into(),
    }
}
