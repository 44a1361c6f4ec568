//! The state every handler shares: the front door, the verifier client, the upstream
//! client to studiod, `app.db` and the cookie policy.
//!
//! Invariant: the state layer imports no handler and no router; handlers, the router and
//! the server import it.

use std::{ops::Deref, sync::Arc};

use crate::{attention::store::Store, frontdoor::FrontDoor, proxy::Proxy, verifier::Verifier};

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) door: FrontDoor,
    pub(crate) verifier: Verifier,
    pub(crate) proxy: Proxy,
    /// `app.db`: the attention queue's dispositions and their history.
    pub(crate) attention: Store,
    /// `Secure` on the admission cookie (the browser reaches us over HTTPS).
    pub(crate) secure_cookies: bool,
}

#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

impl AppState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}
