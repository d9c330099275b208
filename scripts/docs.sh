#!/usr/bin/env bash
# Builds the API docs site into target/docs/ (open target/docs/index.html):
#   target/docs/rust/     rustdoc of ratewindow-core            (cargo doc -p ratewindow-core --no-deps)
#   target/docs/node/     TypeDoc of the npm package            (entry points ts/index.ts, ts/testing.ts, ts/http/*)
#   target/docs/python/   pdoc of the Python package            (the package built into .venv)
#   target/docs/index.html, architecture.html (ARCHITECTURE.md rendered), wit/ (the WIT package as text)
# Installs what it needs (the pinned typedoc and pdoc) and skips each part whose inputs have not
# changed since it was last built; safe to run twice. scripts/test-docs.sh checks the result in Chromium.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/rust-env.sh
out="$root/target/docs"
stamps="$root/target/docs-build"
mkdir -p "$out" "$stamps"

# up_to_date NAME OUTPUT INPUT...: OUTPUT exists and no INPUT changed since part NAME last built.
up_to_date() {
  local stamp="$stamps/$1.stamp" output="$2"
  shift 2
  [ -e "$output" ] && [ -f "$stamp" ] || return 1
  [ -z "$(newer_sources "$stamp" "$@" scripts/docs.sh)" ]
}
# newer_sources REF PATH...: the first source file under PATH... changed after file REF (caches and
# built modules are not sources).
newer_sources() {
  local ref="$1"
  shift
  find "$@" -type f -newer "$ref" \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name '*.ts' \
    -o -name '*.toml' -o -name '*.json' -o -name '*.md' -o -name '*.wit' -o -name '*.html' -o -name '*.sh' \
    -o -name '*.lock' -o -name '*.typed' \) -not -path '*/.mypy_cache/*' -not -path '*/node_modules/*' \
    -print -quit 2> /dev/null
}
# The stamp is taken before a part builds, so an edit made during the build is seen next time.
begin() { touch "$stamps/$1.stamp.new"; echo "docs: building $1"; }
done_() { mv "$stamps/$1.stamp.new" "$stamps/$1.stamp"; }

# --- Rust: rustdoc of the core -------------------------------------------------------------------
if up_to_date rust "$out/rust/ratewindow_core/index.html" core/src core/Cargo.toml core/README.md Cargo.lock; then
  echo "docs: rust up to date"
else
  begin rust
  cargo doc -p ratewindow-core --no-deps --quiet
  mkdir -p "$out/rust"
  rsync -a --delete target/doc/ "$out/rust/"
  done_ rust
fi

# --- Node: TypeDoc of the npm package (reads the .ts sources; needs no addon) ---------------------
node_dir="$root/bindings-node"
if up_to_date node "$out/node/index.html" bindings-node/ts bindings-node/README.md \
     bindings-node/package.json bindings-node/tsconfig.json; then
  echo "docs: node up to date"
else
  begin node
  if [ ! -x "$node_dir/node_modules/.bin/typedoc" ] \
     || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
    scripts/setup-node.sh
  fi
  # --skipErrorChecking: the docs describe the sources as they are; type errors are the node part's job.
  (cd "$node_dir" && node_modules/.bin/typedoc \
    --entryPoints ts/index.ts --entryPoints ts/testing.ts --entryPoints ts/http/express.ts \
    --entryPoints ts/http/fastify.ts --entryPoints ts/http/express-rate-limit.ts --tsconfig tsconfig.json \
    --name "ratewindow (Node)" --readme README.md --disableSources --skipErrorChecking \
    --logLevel Error --out "$out/node")
  done_ node
fi

# --- Python: pdoc of the package installed in .venv -----------------------------------------------
scripts/setup-python.sh
venv="$root/.venv"
py="$venv/bin/python"
py_inputs=(bindings-python/python bindings-python/src bindings-python/Cargo.toml bindings-python/pyproject.toml
  bindings-python/README.md core/src)
installed() { (cd /tmp && "$py" -c 'import ratewindow._ratewindow as m; print(m.__file__)' 2> /dev/null) || true; }
pip_install() {  # as scripts/test-python.sh does: maturin from the pinned requirements, release build
  PATH="$venv/bin:$PATH" VIRTUAL_ENV="$venv" "$py" -m pip install --quiet --disable-pip-version-check \
    --no-build-isolation --force-reinstall --no-deps "$1"
}
module="$(installed)"
if [ -z "$module" ] || [ -n "$(newer_sources "$module" "${py_inputs[@]}")" ]; then
  echo "docs: building the Python package into .venv"
  pip_install "$root/bindings-python" || echo "docs: WARNING: the Python package does not build from this checkout" >&2
  module="$(installed)"
  if [ -z "$module" ]; then
    # Only in a checkout with work in progress: document the last commit rather than nothing.
    echo "docs: WARNING: the Python package does not import from this checkout; building the last commit" >&2
    export_dir="$(mktemp -d)"
    git archive HEAD | tar -x -C "$export_dir"
    CARGO_TARGET_DIR="$root/target" pip_install "$export_dir/bindings-python" || true
    rm -rf "$export_dir"
    module="$(installed)"
  fi
  [ -n "$module" ] || { echo "docs: the Python package is not importable from .venv" >&2; exit 1; }
fi
if up_to_date python "$out/python/ratewindow.html" "${py_inputs[@]}" \
   && ! [ "$module" -nt "$stamps/python.stamp" ]; then
  echo "docs: python up to date"
else
  begin python
  rm -rf "$out/python"
  # From /tmp, so pdoc imports the installed package (with its native module), not the source tree.
  (cd /tmp && "$py" -m pdoc --docformat restructuredtext --footer-text "ratewindow (Python)" \
    -o "$out/python" ratewindow ratewindow.testing ratewindow.asgi ratewindow.fastapi ratewindow.wsgi ratewindow.flask)
  done_ python
fi

# --- index.html, the architecture page, the WIT package as text -----------------------------------
if up_to_date index "$out/index.html" docs wit ARCHITECTURE.md Cargo.toml; then
  echo "docs: index up to date"
else
  begin index
  "$py" - "$root" "$out" << 'EOF'
import html, pathlib, re, shutil, sys
import markdown2  # pdoc's markdown renderer

root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
version = re.search(r'^version = "([^"]+)"', (root / "Cargo.toml").read_text(), re.M).group(1)
page = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #1d2430; }}
pre {{ background: #f7fafc; border: 1px solid #cbd5e0; border-radius: 6px; padding: .75rem; overflow-x: auto; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #cbd5e0; padding: .25rem .5rem; }}</style>
</head><body><p><a href="{up}index.html">ratewindow {version}</a></p>
{body}
</body></html>
"""

# The WIT package: each file as text (.wit.txt, served as text/plain) and all of them on one page.
wit_out = out / "wit"
shutil.rmtree(wit_out, ignore_errors=True)
wit_out.mkdir(parents=True)
files = sorted((root / "wit").glob("*.wit"))
sections = ["<h1>WIT package <code>ratewindow:engine</code></h1>",
            "<ul>" + "".join(f'<li><a href="#{f.stem}">{f.name}</a> (<a href="{f.name}.txt">text</a>)</li>' for f in files) + "</ul>"]
for f in files:
    text = f.read_text()
    (wit_out / f"{f.name}.txt").write_text(text)
    sections.append(f'<h2 id="{f.stem}">{f.name}</h2>\n<pre>{html.escape(text)}</pre>')
(wit_out / "index.html").write_text(page.format(title="ratewindow: WIT package", up="../", version=version,
                                                body="\n".join(sections)))

# ARCHITECTURE.md, rendered.
body = markdown2.markdown((root / "ARCHITECTURE.md").read_text(),
                          extras=["tables", "fenced-code-blocks", "header-ids", "code-friendly"])
(out / "architecture.html").write_text(page.format(title="ratewindow: architecture", up="", version=version, body=body))

# The index, from docs/index.html.
index = (root / "docs" / "index.html").read_text()
index = index.replace("{{version}}", html.escape(version))
index = index.replace("{{wit_files}}", html.escape(", ".join(f.name for f in files)))
(out / "index.html").write_text(index)
EOF
  done_ index
fi
echo "docs: target/docs/index.html"
