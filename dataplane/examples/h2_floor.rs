//! The floor of an HTTP/2 proxy on the `h2` crate: h2c in, one h2c connection out, each
//! stream's headers, DATA and trailers passed through, nothing else (no balancing, no
//! retries, no metrics). Measures what the crate alone costs per request, beside
//! `sluice proxy`:
//!
//!   cargo build --release --example h2_floor -p sluice-dataplane
//!   LOADS=grpc BEFORE=target/release/examples/h2_floor e2e/bench/proxy_limits.sh
//!
//! Takes `sluice proxy`'s `--listen` and `--upstream` and ignores its other options.

use std::error::Error;

use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::{Request, Response};
use tokio::net::{TcpListener, TcpStream};

type Fallible<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args();
    args.find(|a| a == name)?;
    args.next()
}

fn main() -> Fallible<()> {
    let listen = arg("--listen").ok_or("--listen ADDR")?;
    let upstream = arg("--upstream").ok_or("--upstream ADDR")?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(listen, upstream))
}

async fn run(listen: String, upstream: String) -> Fallible<()> {
    let up = TcpStream::connect(&upstream).await?;
    up.set_nodelay(true)?;
    let (send, conn) = h2::client::handshake(up).await?;
    tokio::spawn(conn);
    let listener = TcpListener::bind(&listen).await?;
    println!("proxy: listening on {listen}");
    loop {
        let (sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        let send = send.clone();
        tokio::spawn(async move {
            if let Err(e) = serve(sock, send).await {
                eprintln!("connection: {e}");
            }
        });
    }
}

async fn serve(sock: TcpStream, send: h2::client::SendRequest<Bytes>) -> Fallible<()> {
    let mut conn = h2::server::handshake(sock).await?;
    while let Some(stream) = conn.accept().await {
        let (req, respond) = stream?;
        let send = send.clone();
        tokio::spawn(async move {
            if let Err(e) = forward(req, respond, send).await {
                eprintln!("stream: {e}");
            }
        });
    }
    Ok(())
}

async fn forward(
    req: Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    send: h2::client::SendRequest<Bytes>,
) -> Fallible<()> {
    let (parts, body) = req.into_parts();
    let end = body.is_end_stream();
    let mut send = send.ready().await?;
    let (response, up_body) = send.send_request(Request::from_parts(parts, ()), end)?;
    let (piped, response) = tokio::join!(pipe(body, up_body, end), response);
    piped?;
    let (parts, body) = response?.into_parts();
    let end = body.is_end_stream();
    let down = respond.send_response(Response::from_parts(parts, ()), end)?;
    pipe(body, down, end).await
}

async fn pipe(mut from: RecvStream, mut to: SendStream<Bytes>, ended: bool) -> Fallible<()> {
    if ended {
        return Ok(());
    }
    while let Some(data) = from.data().await {
        let data = data?;
        let n = data.len();
        let end = from.is_end_stream();
        to.send_data(data, end)?;
        from.flow_control().release_capacity(n)?;
        if end {
            return Ok(());
        }
    }
    match from.trailers().await? {
        Some(trailers) => to.send_trailers(trailers)?,
        None => to.send_data(Bytes::new(), true)?,
    }
    Ok(())
}
