# Sourced by the scripts: makes rustup's cargo reachable on a fresh shell of this machine.
if ! command -v cargo > /dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo > /dev/null 2>&1 || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }
