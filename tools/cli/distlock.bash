# bash completion for distlock (installed as share/bash-completion/completions/distlock).
# Completes the verb, the options of each verb, the store URL schemes after --store,
# durations after the duration options, and after "--" the command, as bash would.
_distlock()
{
    local cur prev verb i
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    verb=
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --) # the command and its arguments: complete as commands and files
                if ((i == COMP_CWORD - 1)); then
                    COMPREPLY=($(compgen -c -- "$cur"))
                else
                    COMPREPLY=($(compgen -f -- "$cur"))
                fi
                return 0 ;;
            run|try|status|list|release|revoke|help) [[ -z $verb ]] && verb=${COMP_WORDS[i]} ;;
        esac
    done
    if [[ -z $verb ]]; then
        COMPREPLY=($(compgen -W "run try status list release revoke help --help" -- "$cur"))
        return 0
    fi
    case $prev in
        --store)
            COMPREPLY=($(compgen -W "memory redis:// rediss:// unix:// redis+cluster:// rediss+cluster:// \
redis+sentinel:// rediss+sentinel:// dynamodb:// dynamodbs:// postgres:// postgresql:// etcd:// etcds:// zk://" \
                -- "$cur"))
            compopt -o nospace 2>/dev/null
            return 0 ;;
        --ttl|--wait|--max-hold|--grace|--store-timeout)
            COMPREPLY=($(compgen -W "500ms 10s 30s 1m 5m 1h" -- "$cur"))
            return 0 ;;
        --owner|--fence|--permits)
            return 0 ;;
    esac
    local options
    case $verb in
        run) options="--store --ttl --wait --store-timeout --max-hold --grace --create-table --shared --permits --verbose -v --" ;;
        try) options="--store --ttl --store-timeout --json --create-table --shared --permits" ;;
        status) options="--store --json --create-table" ;;
        list) options="--store --json" ;;
        release) options="--store --owner" ;;
        revoke) options="--store --fence --owner --json" ;;
        *) options="" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
    fi
    return 0
}
complete -F _distlock distlock
