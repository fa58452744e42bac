# ahpty shell integration for zsh (written for ahpty): .zprofile of the ZDOTDIR wrapper.
# Sources the user's .zprofile with the user's ZDOTDIR in place (login shells only).
ZDOTDIR=$__ahpty_user_zdotdir
if [[ -r $ZDOTDIR/.zprofile ]]; then
    builtin source $ZDOTDIR/.zprofile
fi
__ahpty_user_zdotdir=$ZDOTDIR
ZDOTDIR=$__ahpty_zdotdir
