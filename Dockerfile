# The one Sluice image: every part (control plane, syncer, MCS controller, dataplane, DNS)
# is this binary with a subcommand, as the charts run it. Not built on the development
# machines (no registry access there); the local clusters run the `sluice` image as the
# binary they were started with instead (docs/install.md).
#
#   docker build -t ghcr.io/sluice/sluice:0.1.0 .

FROM rust:1.89-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler libcap2-bin \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p sluice --bin sluice \
    # Bind the DNS port (53) and the ingress (80) as a non-root user.
    && setcap cap_net_bind_service=+ep target/release/sluice

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/sluice /usr/bin/sluice
USER 65532:65532
ENTRYPOINT ["/usr/bin/sluice"]
