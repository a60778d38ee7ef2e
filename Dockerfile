# The servesim binary and the bundled scenarios, for the Kubernetes Indexed Job and Slurm
# recipes in docs/results.md ("Sharding across machines"):
#
#   docker build -t servesim .
#   docker run --rm -v "$PWD/results:/results" servesim \
#       sweep /scenarios/routing-comparison.ron --vary 'seed=[1,2,3]' --out /results/sweep
#
# The build stage compiles with the locked dependencies (the same as CI); the image holds
# only the binary, the scenarios it can run as they are, and Debian's C library.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin servesim

FROM debian:bookworm-slim
COPY --from=build /src/target/release/servesim /usr/local/bin/servesim
COPY --from=build /src/scenarios /scenarios
WORKDIR /work
ENTRYPOINT ["servesim"]
CMD ["--help"]
