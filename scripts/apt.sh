# Sourced by scripts/setup.d parts: apt_install installs Debian packages
# without prompts, as root or through sudo, trying the package lists there
# are first and running `apt-get update` only when that fails.
apt_install() {
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	local install=($sudo apt-get install -y -qq --no-install-recommends "$@")
	"${install[@]}" >/dev/null 2>&1 || { $sudo apt-get update -qq >/dev/null 2>&1 && "${install[@]}" >/dev/null 2>&1; }
}
