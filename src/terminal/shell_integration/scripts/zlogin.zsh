# ahpty shell integration for zsh (written for ahpty): .zlogin of the ZDOTDIR wrapper.
# Sources the user's .zlogin (login shells only), then gives ZDOTDIR back to the user.
ZDOTDIR=$__ahpty_user_zdotdir
if [[ -r $ZDOTDIR/.zlogin ]]; then
    builtin source $ZDOTDIR/.zlogin
fi
__ahpty_user_zdotdir=$ZDOTDIR
__ahpty_restore_zdotdir
