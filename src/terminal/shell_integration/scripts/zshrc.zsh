# ahpty shell integration for zsh (written for ahpty): .zshrc of the ZDOTDIR wrapper.
# Sources the user's .zshrc, then reports prompts and commands with OSC 633 sequences (removed
# by the daemon before clients see output): A/B around PS1, E;<cmdline>;<nonce> and C from
# preexec, D;<status> and P;Cwd=<dir> from precmd. Hooks are added with add-zsh-hook, next to
# the user's own.
ZDOTDIR=$__ahpty_user_zdotdir
if [[ -r $ZDOTDIR/.zshrc ]]; then
    builtin source $ZDOTDIR/.zshrc
fi
__ahpty_user_zdotdir=$ZDOTDIR
if [[ -o login ]]; then
    ZDOTDIR=$__ahpty_zdotdir
else
    __ahpty_restore_zdotdir
fi

if [[ -z ${__ahpty_loaded-} && -n ${__ahpty_nonce-} ]]; then
    typeset -g __ahpty_loaded=1
    typeset -g __ahpty_ran=0 __ahpty_status=0 __ahpty_ps1=

    # Escape $1 into REPLY: \ -> \\, ';' and chars <= 0x20 (and DEL) -> \xHH.
    __ahpty_escape() {
        emulate -L zsh
        local s=$1 out= c h
        local -i i
        for (( i = 1; i <= ${#s}; i++ )); do
            c=${s[i]}
            if [[ $c == '\' ]]; then
                out+='\\'
            elif [[ $c == ';' ]]; then
                out+='\x3b'
            elif (( #c <= 32 || #c == 127 )); then
                printf -v h '\\x%02x' $(( #c ))
                out+=$h
            else
                out+=$c
            fi
        done
        REPLY=$out
    }

    # First precmd hook: keep the command's exit status before other hooks run.
    __ahpty_capture() {
        __ahpty_status=$?
        return $__ahpty_status
    }

    __ahpty_precmd() {
        local ret=$?
        emulate -L zsh
        if (( __ahpty_ran )); then
            printf '\e]633;D;%s;%s\a' $__ahpty_status $__ahpty_nonce
        fi
        __ahpty_ran=0
        __ahpty_escape $PWD
        printf '\e]633;P;Cwd=%s;%s\a' $REPLY $__ahpty_nonce
        # Re-wrap PS1 if a theme rewrote it.
        if [[ $PS1 != $__ahpty_ps1 ]]; then
            __ahpty_ps1=$'%{\e]633;A;'$__ahpty_nonce$'\a%}'$PS1$'%{\e]633;B;'$__ahpty_nonce$'\a%}'
            PS1=$__ahpty_ps1
        fi
        return $ret
    }

    __ahpty_preexec() {
        emulate -L zsh
        __ahpty_ran=1
        __ahpty_escape $1
        printf '\e]633;E;%s;%s\a\e]633;C;%s\a' $REPLY $__ahpty_nonce $__ahpty_nonce
    }

    autoload -Uz add-zsh-hook
    typeset -ga precmd_functions
    precmd_functions=(__ahpty_capture $precmd_functions)
    add-zsh-hook precmd __ahpty_precmd
    add-zsh-hook preexec __ahpty_preexec
fi
