# ahpty shell integration for bash (written for ahpty).
# Loaded as `bash --rcfile <this file> -i`. It first loads the user's usual startup files, then
# reports prompts and commands to the ahpty daemon with OSC 633 sequences, which the daemon
# removes from the output before any client sees them. The user's files are never modified.
# Marks: A/B around PS1, E;<cmdline>;<nonce> and C from PS0, D;<status> and P;Cwd=<dir> from
# PROMPT_COMMAND. Everything here tolerates `set -u` and leaves $? as the user's command set it.

# The nonce comes in a one-shot file: read and delete it before anything else runs, so no
# program started from this shell can learn it (a variable would stay in /proc/PID/environ).
if [ -n "${AHPTY_SI_NONCE_FILE-}" ]; then
    IFS= read -r __ahpty_nonce < "$AHPTY_SI_NONCE_FILE" || [ -n "${__ahpty_nonce-}" ]
    command rm -f -- "$AHPTY_SI_NONCE_FILE"
fi
unset AHPTY_SI_NONCE_FILE

# Startup files bash would have read without --rcfile. Debian-style builds read
# /etc/bash.bashrc themselves even with --rcfile; only source it when PS1 still has bash's
# built-in default (i.e. it has not been read).
if [ -r /etc/bash.bashrc ] && [ "${PS1-}" = '\s-\v\$ ' ]; then
    . /etc/bash.bashrc
fi
if [ -r "${HOME-}/.bashrc" ]; then
    . "${HOME-}/.bashrc"
fi

if [ -z "${__ahpty_loaded-}" ] && [ -n "${__ahpty_nonce-}" ]; then
__ahpty_loaded=1
__ahpty_ran=0
__ahpty_zero=
__ahpty_hnext=
# Values we last gave PS1/PS0 (a sentinel first, so an empty PS0 still gets wrapped).
__ahpty_ps1=$'\1'
__ahpty_ps0=$'\1'

# Escape $1 into __ahpty_r for an E or P mark: \ -> \\, ';' and bytes <= 0x20 (and DEL) -> \xHH.
__ahpty_escape() {
    local LC_ALL=C
    local s=$1 out='' c h
    local -i i n=${#s}
    for (( i = 0; i < n; i++ )); do
        c=${s:i:1}
        case $c in
            '\') out+='\\' ;;
            ';') out+='\x3b' ;;
            [[:cntrl:]] | ' ') printf -v h '\\x%02x' "'$c"; out+=$h ;;
            *) out+=$c ;;
        esac
    done
    __ahpty_r=$out
}

# Runs inside PS0's command substitution (a subshell), right before the command executes.
__ahpty_preexec() {
    local line num HISTTIMEFORMAT=
    line=$(builtin history 1 2>/dev/null) || line=
    line=${line#"${line%%[![:space:]]*}"}
    num=${line%%[!0-9]*}
    if [ -n "$num" ] && [ "$num" = "${__ahpty_hnext-}" ]; then
        line=${line#"$num"}
        line=${line#\*}
        line=${line#  }
        __ahpty_escape "$line"
        builtin printf '\e]633;E;%s;%s\a' "$__ahpty_r" "$__ahpty_nonce"
    fi
    builtin printf '\e]633;C;%s\a' "$__ahpty_nonce"
}

# First PROMPT_COMMAND entry: report the finished command, then hand $? on unchanged.
__ahpty_precmd() {
    local status=$?
    if [ "${__ahpty_ran-0}" = 1 ]; then
        builtin printf '\e]633;D;%s;%s\a' "$status" "$__ahpty_nonce"
    fi
    __ahpty_ran=0
    __ahpty_escape "$PWD"
    builtin printf '\e]633;P;Cwd=%s;%s\a' "$__ahpty_r" "$__ahpty_nonce"
    return "$status"
}

# Last PROMPT_COMMAND entry: (re)wrap PS1 and PS0 in case the user's hooks rewrote them.
__ahpty_prompt() {
    local status=$?
    __ahpty_hnext=$HISTCMD
    if [ "${PS1-}" != "$__ahpty_ps1" ]; then
        __ahpty_ps1='\[\e]633;A;'"$__ahpty_nonce"'\a\]'"${PS1-}"'\[\e]633;B;'"$__ahpty_nonce"'\a\]'
        PS1=$__ahpty_ps1
    fi
    if [ "${PS0-}" != "$__ahpty_ps0" ]; then
        # The arithmetic expansion marks "a command ran" in this shell; the command
        # substitution prints E and C.
        __ahpty_ps0='${__ahpty_zero:0:$((__ahpty_ran=1,0))}$(__ahpty_preexec)'"${PS0-}"
        PS0=$__ahpty_ps0
    fi
    return "$status"
}

# Keep the user's PROMPT_COMMAND (array or string) between our two entries.
if [[ "$(declare -p PROMPT_COMMAND 2>/dev/null)" == "declare -a"* ]]; then
    PROMPT_COMMAND=(__ahpty_precmd ${PROMPT_COMMAND[@]+"${PROMPT_COMMAND[@]}"} __ahpty_prompt)
elif [ -n "${PROMPT_COMMAND-}" ]; then
    PROMPT_COMMAND="__ahpty_precmd"$'\n'"$PROMPT_COMMAND"$'\n'"__ahpty_prompt"
else
    PROMPT_COMMAND="__ahpty_precmd"$'\n'"__ahpty_prompt"
fi
fi
