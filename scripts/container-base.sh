#!/usr/bin/env bash
# Prepares podman on a Debian bookworm machine that has no Docker engine and cannot reach an
# image registry, so that `make container-test` and `make kube-test` can build and run the image:
#
#   1. podman, buildah, runc, debootstrap, uidmap and catatonit come from Debian when any is
#      missing;
#   2. a podman configuration for sandboxes that refuse podman's default ulimits, with runc as
#      the runtime (CONTAINERS_CONF names it; it is written once, never overwritten);
#   3. the Dockerfile's base, debian:bookworm-slim, is made locally: a minbase bookworm root from
#      debootstrap, fetched from the Debian mirror this machine's apt sources name, with those
#      sources copied in (apt-get inside the image build reaches the same mirror), imported
#      under the name `FROM debian:bookworm-slim` resolves to.
#
# Idempotent: what exists is left alone, so a second run only checks. Needs root (or sudo).
# Ends by printing the line to eval:   eval "$(bash scripts/container-base.sh | tail -n 1)"
# Then:  podman build --pull=never --isolation chroot --network host --format docker -t attnserve .
#
# Env: ATTNSERVE_BASE_IMAGE (docker.io/library/debian:bookworm-slim) names the image to make,
#      CONTAINERS_CONF (/etc/containers/containers-sandbox.conf) the configuration to write.
set -euo pipefail

image=${ATTNSERVE_BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
conf=${CONTAINERS_CONF:-/etc/containers/containers-sandbox.conf}
suite=bookworm

say() { echo "container-base: $*" >&2; }
if [[ $(id -u) != 0 ]]; then
  exec sudo ATTNSERVE_BASE_IMAGE="$image" CONTAINERS_CONF="$conf" bash "$0" "$@"
fi

# 1. The tools, from Debian.
# catatonit: the pause process of the pods `podman kube play` makes (a recommendation of podman's)
tools=(podman buildah runc debootstrap uidmap catatonit)
missing=()
for package in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$' ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  # Another apt-get (scripts/install-deps.sh) may hold the lock: wait for it rather than fail.
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The configuration. Podman's default ulimits (nofile, nproc) cannot be raised inside some
# sandboxes, and crun is not what Debian's podman pulls in everywhere: runc is.
if [[ ! -f $conf ]]; then
  say "writing $conf"
  mkdir -p "$(dirname "$conf")"
  tee "$conf" >/dev/null <<'EOF'
# Written by attnserve's scripts/container-base.sh: podman inside a sandbox.
[containers]
# No ulimits forced on containers: the sandbox refuses to raise them.
default_ulimits = []

[engine]
runtime = "runc"
EOF
fi
export CONTAINERS_CONF=$conf

# 3. The base image.
if podman image exists "$image"; then
  say "$image is present"
else
  # The first Debian archive among this machine's sources (deb822 .sources files, then
  # one-line .list files) whose suites include bookworm itself, not only -security or -updates.
  source_files=()
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f $f ]] && source_files+=("$f")
  done
  mirror=""
  mirror_file=""
  for f in "${source_files[@]}"; do
    if [[ $f == *.sources ]]; then
      # Paragraphs separated by blank lines; comments are skipped.
      mirror=$(awk -v suite="$suite" '
        /^[[:space:]]*#/ { next }
        /^[[:space:]]*$/ { if (uri != "" && has_suite && is_deb) { print uri; exit } uri = ""; has_suite = 0; is_deb = 0; next }
        /^Types:/  { for (i = 2; i <= NF; i++) if ($i == "deb") is_deb = 1 }
        /^URIs:/   { uri = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
        END { if (uri != "" && has_suite && is_deb) print uri }' "$f" | head -n 1)
    else
      mirror=$(awk -v suite="$suite" '$1 == "deb" {
        i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit } }' "$f")
    fi
    if [[ -n $mirror ]]; then mirror_file=$f; break; fi
  done
  [[ -n $mirror ]] || { say "no Debian $suite archive in this machine's apt sources"; exit 1; }

  say "building $image: debootstrap --variant=minbase $suite from $mirror"
  root=$(mktemp -d /var/tmp/attnserve-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >/dev/null
  # The same sources as this machine (the file that named the mirror; a deb822 file also names
  # the security archive), so the image build's apt-get reaches what this machine reaches.
  if [[ $mirror_file == *.sources ]]; then
    cp "$mirror_file" "$root/etc/apt/sources.list.d/"
    rm -f "$root/etc/apt/sources.list"
  else
    cp "$mirror_file" "$root/etc/apt/sources.list"
  fi
  # What debootstrap downloaded is not part of an image.
  find "$root/var/cache/apt/archives" -name '*.deb' -delete
  find "$root/var/lib/apt/lists" -mindepth 1 -maxdepth 1 -type f -delete
  tar -C "$root" -c . | podman import --quiet - "$image" >/dev/null
  say "$image imported ($(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%d MB", $1 / 1e6}'))"
fi

echo "export CONTAINERS_CONF=$conf"
