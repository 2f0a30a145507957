#!/usr/bin/env bash
# Query a running DNS server with real resolvers' tools (BIND's dig and Knot's kdig) and
# compare each answer with the expected one.
#
#   e2e/tests/dig.sh HOST PORT CASES
#
# CASES has one case a line (blank lines and lines starting with # are skipped):
#
#   QNAME QTYPE RCODE [ANSWER ...]
#
#   svc-a.ns1.svc.clusterset.local              A    NOERROR  127.60.0.1 127.60.0.2
#   _http._tcp.svc-a.ns1.svc.clusterset.local   SRV  NOERROR  0,100,80,svc-a.ns1.svc.clusterset.local.
#   nope.ns1.svc.clusterset.local               A    NXDOMAIN -
#   svc-a.ns1.svc.clusterset.local              AAAA NOERROR  -
#
# RCODE is the header status as dig prints it (NOERROR, NXDOMAIN, SERVFAIL, REFUSED, NOTIMP,
# ...; kdig's NOTIMPL is taken as NOTIMP), or NOREPLY for a server that must not answer.
# Each ANSWER is the rdata of one answer-section record; an rdata of several fields (SRV,
# MX, SOA) has its fields joined by commas, as above. `-` (or nothing) means an empty
# answer section. Answers are compared as sorted lists, so neither the file nor the server
# needs any order; names are compared case-insensitively. Every record of the answer
# section counts (a CNAME chain's CNAMEs too), whatever its type. TTLs are not compared.
#
# Every case is sent over UDP by dig and by kdig; the first case is also sent over TCP by
# both. Prints `ok` or `FAIL` per query and exits 1 if any failed (2 on a usage error).
# kdig is optional: without it the kdig queries are skipped with a note. With DIG_SOURCE
# set, every query is sent from that address (both tools' -b).
set -euo pipefail

usage() {
    echo "usage: $0 HOST PORT CASES" >&2
    exit 2
}
[[ $# -eq 3 ]] || usage
host=$1
port=$2
cases=$3
[[ $port =~ ^[0-9]+$ ]] || usage
[[ -r $cases ]] || { echo "$0: cannot read $cases" >&2; exit 2; }
command -v dig >/dev/null || { echo "$0: dig not found (Debian: dnsutils)" >&2; exit 2; }
have_kdig=1
command -v kdig >/dev/null || { have_kdig=0; echo "note: kdig not found (Debian: knot-dnsutils), kdig queries skipped" >&2; }

# Run one query and print it normalised: the first line is the rcode (NOREPLY when no
# response came back), then one line per answer record with the record's rdata, fields
# joined by commas, lower-cased.
#   query TOOL PROTO QNAME QTYPE   (TOOL: dig|kdig, PROTO: udp|tcp)
query() {
    local tool=$1 proto=$2 qname=$3 qtype=$4 out
    local -a cmd
    # -q/-t so that a qname that looks like a type or class is still taken as a name.
    if [[ $tool == dig ]]; then
        # -r: ignore ~/.digrc; +comments prints the header (status) line.
        cmd=(dig -r +tries=1 +time=2 "@$host" -p "$port" -q "$qname" -t "$qtype" +noall +comments +answer)
    else
        # kdig: +retry=0 is one try; +header prints the status line (+comments does not).
        cmd=(kdig +retry=0 +timeout=2 "@$host" -p "$port" -q "$qname" -t "$qtype" +noall +header +answer)
    fi
    [[ $proto == tcp ]] && cmd+=(+tcp)
    # DIG_SOURCE: the address queries come from (a pod's IP), for answers that depend on it.
    [[ -n ${DIG_SOURCE:-} ]] && cmd+=(-b "$DIG_SOURCE")
    # A failed query is a result (NOREPLY), not a reason to stop the script.
    out=$("${cmd[@]}" </dev/null 2>&1) || true
    awk '
        # dig: ";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1"
        # kdig: ";; ->>HEADER<<- opcode: QUERY; status: NOERROR; id: 1"
        /->>HEADER<<-/ && rcode == "" {
            if (match($0, /status: [A-Za-z0-9]+/)) rcode = toupper(substr($0, RSTART + 8, RLENGTH - 8))
            # The one rcode the two spell differently: BIND NOTIMP, Knot NOTIMPL.
            if (rcode == "NOTIMPL") rcode = "NOTIMP"
            next
        }
        # Comments, section titles, warnings, errors, blank lines.
        /^;/ || /^[[:space:]]*$/ { next }
        # A record: NAME TTL CLASS TYPE RDATA... (dig and kdig both print the TTL and class
        # with +answer; the separators are a mix of tabs and spaces).
        NF >= 5 {
            rd = $5
            for (i = 6; i <= NF; i++) rd = rd "," $i
            answers[++n] = tolower(rd)
        }
        END {
            print (rcode == "" ? "NOREPLY" : rcode)
            for (i = 1; i <= n; i++) print answers[i]
        }
    ' <<<"$out"
}

# The expected answers of a case, one per line, sorted, lower-cased.
expected_answers() {
    local a
    for a in "$@"; do
        [[ $a == - ]] && continue
        printf '%s\n' "${a,,}"
    done | LC_ALL=C sort
}

failed=0
total=0
first=1
while read -r qname qtype rcode expected || [[ -n ${qname:-} ]]; do
    [[ -z ${qname:-} || $qname == \#* ]] && continue
    if [[ -z ${qtype:-} || -z ${rcode:-} ]]; then
        echo "$0: bad case line: $qname ${qtype:-} ${rcode:-}" >&2
        exit 2
    fi
    read -r -a want_list <<<"${expected:-}"
    want=$(expected_answers "${want_list[@]+"${want_list[@]}"}")
    want_rcode=${rcode^^}
    [[ $want_rcode == NOTIMPL ]] && want_rcode=NOTIMP

    runs=("dig udp")
    ((have_kdig)) && runs+=("kdig udp")
    if ((first)); then
        runs+=("dig tcp")
        ((have_kdig)) && runs+=("kdig tcp")
        first=0
    fi
    for run in "${runs[@]}"; do
        read -r tool proto <<<"$run"
        total=$((total + 1))
        result=$(query "$tool" "$proto" "$qname" "$qtype")
        got_rcode=$(head -n1 <<<"$result")
        got=$(tail -n +2 <<<"$result" | LC_ALL=C sort)
        label=$(printf '%-4s %-3s %s %s' "$tool" "$proto" "$qname" "$qtype")
        if [[ $got_rcode == "$want_rcode" && $got == "$want" ]]; then
            echo "ok   $label"
        else
            failed=$((failed + 1))
            echo "FAIL $label"
            echo "     want: $want_rcode ${want//$'\n'/ }"
            echo "     got:  $got_rcode ${got//$'\n'/ }"
        fi
    done
done <"$cases"

if ((total == 0)); then
    echo "$0: no cases in $cases" >&2
    exit 2
fi
echo "$((total - failed))/$total queries ok"
((failed == 0))
