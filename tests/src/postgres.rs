//! studiod's state in PostgreSQL for the end-to-end suites run a second time
//! (`scripts/test`): when `STUDIO_TEST_DATABASE_URL` names a server, each home gets a new
//! database of its own there, kept in the home so a restarted Studio finds it again.

use std::path::Path;

/// The server the suites run against, if any.
pub fn server() -> Option<String> {
    std::env::var("STUDIO_TEST_DATABASE_URL")
        .ok()
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
}

/// Whether studiod keeps its state in PostgreSQL in this run.
pub fn enabled() -> bool {
    server().is_some()
}

/// The database of `home`: the one it was given before, else a new one on the server.
/// `None` when no server is named.
pub fn database_for(home: &Path) -> Option<String> {
    let server = server()?;
    let record = home.join("test-database-url");
    if let Ok(url) = std::fs::read_to_string(&record) {
        return Some(url);
    }
    let url = create_database(&server);
    std::fs::write(&record, &url).expect("remember the home's database");
    Some(url)
}

/// Makes a new empty database on `server` (a `postgres://` URL); its URL.
fn create_database(server: &str) -> String {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("studio_e2e_{}_{n}_{nanos}", std::process::id());
    let server = studio_store::DatabaseUrl::parse(server).expect("STUDIO_TEST_DATABASE_URL");
    // Its own thread and runtime: the caller may be inside a test's runtime already.
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(studio_store::create_database(&server, &name))
            .expect("create the home's database")
            .expose()
            .to_owned()
    })
    .join()
    .expect("the database was made")
}
