#!/usr/bin/env bash
# Install the smallest Debian/Ubuntu TeX Live set that builds paper/main.tex
#   cd paper && latexmk -pdf -interaction=nonstopmode main.tex
#
# Minimal set: latexmk texlive-latex-base texlive-latex-recommended (+ poppler-utils for
# pdftoppm page previews). It provides booktabs, graphicx, amsmath, hyperref, float,
# caption/subcaption, xcolor, geometry and microtype.  multirow lives in the much larger
# texlive-latex-extra; main.tex falls back to plain cells without it, so it is optional:
#   SAAH_LATEX_EXTRA=1 tools/install_latex.sh     # also install texlive-latex-extra
#   SAAH_LATEX_POPPLER=0 tools/install_latex.sh   # skip poppler-utils
#
# Measured on Debian 12 (bookworm), Nov 2026:
#   minimal set + poppler-utils: 48.3 MB + 2.2 MB of archives, 152 MB + 6 MB installed,
#     about 50 s including format generation;
#   texlive-latex-extra would add about 41 MB of archives and 165 MB installed.
#
# Idempotent: does nothing when latexmk and pdflatex are already on PATH.
set -euo pipefail

if command -v latexmk >/dev/null 2>&1 && command -v pdflatex >/dev/null 2>&1; then
    echo "install_latex: latexmk and pdflatex already present, nothing to do."
    if ! command -v pdftoppm >/dev/null 2>&1; then
        echo "install_latex: (pdftoppm missing: apt-get install poppler-utils for page previews)"
    fi
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_latex: apt-get not found. Install a TeX distribution with latexmk and pdflatex" >&2
    echo "               (TeX Live or MiKTeX) by hand; see the package list at the top of this script." >&2
    exit 1
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install_latex: must run as root to install Debian packages. Try:" >&2
    echo "               sudo $0" >&2
    exit 1
fi

pkgs=(latexmk texlive-latex-base texlive-latex-recommended)
if [ "${SAAH_LATEX_EXTRA:-0}" = "1" ]; then
    pkgs+=(texlive-latex-extra)
fi
if [ "${SAAH_LATEX_POPPLER:-1}" = "1" ]; then
    pkgs+=(poppler-utils)
fi

echo "install_latex: installing ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends "${pkgs[@]}"
echo "install_latex: done: $(pdflatex --version | head -n 1)"
