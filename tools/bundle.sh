#!/usr/bin/env bash
# Gathers seqbench's Debian-packaged dependencies into .bundle/ (ignored by git), for GPU
# machines that have CUDA, CMake, Ninja and a C++ compiler but no package access. The build
# uses the bundle only for what the system lacks (see CMakeLists.txt, SEQBENCH_BUNDLE_DIR).
#
#   tools/bundle.sh            # makes .bundle/root/usr/... and prints its size
#
# It downloads the .deb files with apt-get (no root needed for download), unpacks them with
# dpkg -x, and drops documentation, which is most of the weight.
set -euo pipefail
cd "$(dirname "$0")/.."

bundle=.bundle
packages=(libeigen3-dev nlohmann-json3-dev libcli11-dev googletest libbenchmark-dev libbenchmark1debian)

rm -rf "$bundle"
mkdir -p "$bundle/debs" "$bundle/root"
chmod a+rwx "$bundle/debs"  # apt-get download runs as the _apt user where it can
(cd "$bundle/debs" && apt-get download "${packages[@]}")
for deb in "$bundle"/debs/*.deb; do dpkg -x "$deb" "$bundle/root"; done
rm -rf "$bundle/debs" "$bundle/root/usr/share/doc" "$bundle/root/usr/share/man" \
  "$bundle/root/usr/share/lintian" "$bundle/root/usr/share/pkgconfig"
# Eigen's unsupported/ modules and GoogleTest's docs are not used.
rm -rf "$bundle/root/usr/include/eigen3/unsupported" "$bundle/root/usr/src/googletest/docs" \
  "$bundle/root/usr/src/googletest/googlemock/docs" "$bundle/root/usr/src/googletest/googletest/docs"
printf '%s\n' "${packages[@]}" > "$bundle/PACKAGES"
echo "bundle: $(du -sh "$bundle" | cut -f1) in $bundle/ (${packages[*]})"
