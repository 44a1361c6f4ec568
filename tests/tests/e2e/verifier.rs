//! The verifier socket refuses anyone without the launch's app key.

use std::{os::unix::fs::PermissionsExt, path::PathBuf};

use studio_proto::v1::{HelloRequest, WatchRequest, verifier_client::VerifierClient};
use studio_tests::Studio;
use tonic::{Code, Request, transport::Endpoint};

async fn client(socket: PathBuf) -> VerifierClient<tonic::transport::Channel> {
    let channel = Endpoint::try_from("http://verifier")
        .expect("endpoint")
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect to the verifier socket");
    VerifierClient::new(channel)
}

/// The code a `Hello` without an app key gets from the verifier at `socket`.
pub(crate) async fn hello_without_key(socket: PathBuf) -> Code {
    let mut verifier = client(socket).await;
    let hello = HelloRequest {
        protocol_version: 1,
        client: "test".into(),
    };
    match verifier.hello(hello).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_the_app_key_is_refused() {
    let studio = Studio::start();
    let run = studio.home_path().join("run");
    let socket = run.join("verifier.sock");
    let dir_mode = std::fs::metadata(&run)
        .expect("run dir")
        .permissions()
        .mode();
    let sock_mode = std::fs::metadata(&socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    assert_eq!(sock_mode & 0o777, 0o600);
    let token_mode = std::fs::metadata(run.join("token"))
        .expect("token")
        .permissions()
        .mode();
    assert_eq!(token_mode & 0o777, 0o600);

    let mut verifier = client(socket).await;
    let err = verifier
        .hello(HelloRequest {
            protocol_version: 1,
            client: "test".into(),
        })
        .await
        .expect_err("no app key");
    assert_eq!(err.code(), Code::PermissionDenied);

    let mut req = Request::new(HelloRequest {
        protocol_version: 1,
        client: "test".into(),
    });
    req.metadata_mut().insert(
        studio_proto::APP_KEY_METADATA,
        studio_contract::secret::AppKey::generate()
            .to_hex()
            .parse()
            .expect("ascii"),
    );
    let err = verifier.hello(req).await.expect_err("wrong app key");
    assert_eq!(err.code(), Code::PermissionDenied);

    // The daemon token is not an app key either.
    let mut req = Request::new(WatchRequest {});
    req.metadata_mut().insert(
        studio_proto::APP_KEY_METADATA,
        studio.token().parse().expect("ascii"),
    );
    let err = verifier.watch(req).await.expect_err("token is no app key");
    assert_eq!(err.code(), Code::PermissionDenied);
}
