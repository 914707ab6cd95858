# kctl node image: ZooKeeper + Kafka 3.9 (ZooKeeper mode) on Java 17, run by
# supervisord. Built by kctl/runtime/image/build.py from an assembled context:
#   Dockerfile   this file
#   node/        kctl/runtime/image/node/* (entrypoint, supervisord config, wrappers)
#   kafka/       the Kafka distribution (bin/, libs/, config/, kctl-dist.json)
#   monitoring/  the metrics exporters' jars (kctl/runtime/image/exporters.py)
# BASE_IMAGE defaults to the registry image; kctl passes a locally imported
# debootstrap image where no registry is reachable.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ARG DEBIAN_FRONTEND=noninteractive
# Layer order: slow and stable first (apt, then the ~130 MB dist), the small
# kctl scripts last, so editing a script rebuilds in seconds.
RUN groupadd --gid 555 logger \
 && useradd --uid 555 --gid 555 --create-home --shell /bin/bash logger \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless supervisor netcat-openbsd procps ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && rm -f /etc/supervisor/conf.d/*.conf

# Fault injection for `kctl drill` (tc netem; iptables where the kernel has no netem): its own layer,
# so adding it reuses the JRE layer above. The container needs NET_ADMIN to use them (compose.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 iptables \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb

COPY kafka/ /opt/kafka/

# Class-data sharing archives of ZooKeeper's and Kafka's classes (node/cds-archive starts both once and
# writes what they loaded): every start of either JVM maps them instead of reading and verifying the jars.
# Its own layer, before the other node files: editing those does not make the archives again.
COPY node/cds-archive /usr/local/lib/kctl/cds-archive
RUN chmod 0755 /usr/local/lib/kctl/cds-archive && /usr/local/lib/kctl/cds-archive /opt/kafka/cds

# The metrics exporters (kctl/runtime/image/exporters.py): the JMX exporter agent of the brokers, and ZooKeeper's
# Prometheus metrics provider with what it needs beyond Kafka's libs/.
COPY monitoring/ /opt/kctl/monitoring/

COPY node/ /usr/local/lib/kctl/
RUN chmod 0755 /usr/local/lib/kctl/entrypoint.sh /usr/local/lib/kctl/zookeeper-start \
      /usr/local/lib/kctl/kafka-start /usr/local/lib/kctl/controller-start /usr/local/lib/kctl/mirrormaker-start \
      /usr/local/lib/kctl/held /usr/local/lib/kctl/idle /usr/local/lib/kctl/retired /usr/local/lib/kctl/unformatted \
      /usr/local/lib/kctl/healthcheck \
 && chmod 0644 /usr/local/lib/kctl/jvm-common.sh /usr/local/lib/kctl/*.conf \
 && ln -sf /usr/local/lib/kctl/entrypoint.sh /usr/local/bin/kctl-entrypoint \
 && ln -sf /usr/local/lib/kctl/healthcheck /usr/local/bin/kctl-healthcheck \
 && cp /usr/local/lib/kctl/supervisord.conf /etc/supervisor/supervisord.conf \
 && mkdir -p /etc/kctl /var/opt/kctl /var/log/kctl \
 && touch /var/opt/kctl/.kctl-format-kafka /var/opt/kctl/.kctl-format-controller \
 && chown -R 555:555 /var/opt/kctl /var/log/kctl

ENV PATH=/opt/kafka/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    KAFKA_HOME=/opt/kafka \
    LANG=C.UTF-8
WORKDIR /var/opt/kctl
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=5s --timeout=10s --start-period=120s --retries=3 CMD ["/usr/local/bin/kctl-healthcheck"]
ENTRYPOINT ["/usr/local/bin/kctl-entrypoint"]
