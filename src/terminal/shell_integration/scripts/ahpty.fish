# ahpty shell integration for fish (written for ahpty).
# Loaded from a vendor_conf.d directory that the daemon puts first on XDG_DATA_DIRS; the user's
# config is untouched. Reports prompts and commands with OSC 633 sequences (removed by the
# daemon before clients see output): P;Cwd and A on the fish_prompt event, E;<cmdline>;<nonce>
# and C on fish_preexec, D;<status> on fish_postexec.

# Give XDG_DATA_DIRS back as it was before the daemon added this directory.
if set -q AHPTY_SI_XDG_DATA_DIRS
    if test -n "$AHPTY_SI_XDG_DATA_DIRS"
        set -gx XDG_DATA_DIRS $AHPTY_SI_XDG_DATA_DIRS
    else
        set -e XDG_DATA_DIRS
    end
    set -e AHPTY_SI_XDG_DATA_DIRS
end

# The nonce comes in a one-shot file: read and delete it at once, so no program started from
# this shell can learn it (a variable would stay in /proc/PID/environ).
if set -q AHPTY_SI_NONCE_FILE
    read -g __ahpty_nonce < $AHPTY_SI_NONCE_FILE
    command rm -f -- $AHPTY_SI_NONCE_FILE
    set -e AHPTY_SI_NONCE_FILE
end

if status is-interactive; and set -q __ahpty_nonce; and test -n "$__ahpty_nonce"; and not set -q __ahpty_loaded
    set -g __ahpty_loaded 1
    set -g __ahpty_ran 0

    # Print $argv[1] escaped: \ -> \\, ';' and chars <= 0x20 (and DEL) -> \xHH.
    function __ahpty_escape
        test -n "$argv[1]"; or return 0
        set -l s (string replace -a -- '\\' '\\\\' $argv[1] | string collect)
        set s (string replace -a -- \n '\x0a' "$s" | string collect)
        set s (string replace -a -- ';' '\x3b' "$s" | string collect)
        for h in 01 02 03 04 05 06 07 08 09 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f 20 7f
            set -l c (printf "\\x$h")
            set s (string replace -a -- "$c" "\\x$h" "$s" | string collect)
        end
        printf '%s' "$s"
    end

    function __ahpty_prompt --on-event fish_prompt
        set -l dir (__ahpty_escape "$PWD" | string collect)
        printf '\e]633;P;Cwd=%s;%s\a\e]633;A;%s\a' "$dir" "$__ahpty_nonce" "$__ahpty_nonce"
    end

    function __ahpty_preexec --on-event fish_preexec
        set -g __ahpty_ran 1
        set -l line (__ahpty_escape "$argv[1]" | string collect)
        printf '\e]633;E;%s;%s\a\e]633;C;%s\a' "$line" "$__ahpty_nonce" "$__ahpty_nonce"
    end

    function __ahpty_postexec --on-event fish_postexec
        set -l st $status
        if test "$__ahpty_ran" = 1
            printf '\e]633;D;%s;%s\a' $st "$__ahpty_nonce"
        end
        set -g __ahpty_ran 0
    end
end
