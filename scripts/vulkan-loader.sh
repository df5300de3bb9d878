# Sourced on a GPU host: makes the NVIDIA Vulkan driver reachable where the host has no Vulkan
# loader installed. The loader packages are fetched once on the build machine into .gl/
# (git-ignored, carried to the host):
#   mkdir -p .gl /tmp/amd64/partial
#   o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Returns non-zero where there is no loader and none to unpack.
if ! ldconfig -p | grep -q libvulkan.so.1; then
  if ! ls .gl/*.deb > /dev/null 2>&1; then
    return 1 2> /dev/null || exit 1
  fi
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$icd" ]; then
    export VK_DRIVER_FILES="$icd"
    break
  fi
done
[ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ] &&
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
true
