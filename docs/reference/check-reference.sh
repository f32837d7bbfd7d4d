#!/bin/sh
# check-reference.sh GI_DOCGEN GIR: fails (listing them) if gi-docgen finds
# public symbols without documentation in GIR.
out=$("$1" check "$2" 2>&1) || { printf '%s\n' "$out"; exit 1; }
missing=$(printf '%s\n' "$out" | grep -c 'WARNING')
printf '%s\n' "$out" | grep 'WARNING'
echo "check-reference: $missing undocumented symbol(s)"
[ "$missing" -eq 0 ]
