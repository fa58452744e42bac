# ahpty shell integration for zsh (written for ahpty): .zshenv of the ZDOTDIR wrapper.
# The daemon starts zsh with ZDOTDIR pointing at this directory so zsh reads these files; each
# one sources the user's own file (from USER_ZDOTDIR, default $HOME) with the user's ZDOTDIR in
# place, then puts this directory back so zsh reads the next wrapper file. .zshrc adds the hooks.
# The user's files are never modified; child shells get the user's ZDOTDIR back.

# The nonce comes in a one-shot file: read and delete it before anything else runs, so no
# program started from this shell can learn it (a variable would stay in /proc/PID/environ).
if [[ -n ${AHPTY_SI_NONCE_FILE-} ]]; then
    typeset -g __ahpty_nonce="$(<$AHPTY_SI_NONCE_FILE)"
    command rm -f -- $AHPTY_SI_NONCE_FILE
fi
unset AHPTY_SI_NONCE_FILE

__ahpty_zdotdir=$ZDOTDIR
if [[ -n ${USER_ZDOTDIR+x} ]]; then
    ZDOTDIR=$USER_ZDOTDIR
else
    ZDOTDIR=$HOME
fi
if [[ -r $ZDOTDIR/.zshenv && $ZDOTDIR != $__ahpty_zdotdir ]]; then
    builtin source $ZDOTDIR/.zshenv
fi
# The user's .zshenv may itself move ZDOTDIR; follow it for the other files.
__ahpty_user_zdotdir=$ZDOTDIR

# Give the user's ZDOTDIR back (for child shells) once startup is done.
__ahpty_restore_zdotdir() {
    if [[ -n ${USER_ZDOTDIR+x} || $__ahpty_user_zdotdir != $HOME ]]; then
        export ZDOTDIR=$__ahpty_user_zdotdir
    else
        unset ZDOTDIR
    fi
    unset USER_ZDOTDIR
}

if [[ -o interactive ]]; then
    ZDOTDIR=$__ahpty_zdotdir
else
    __ahpty_restore_zdotdir
fi
