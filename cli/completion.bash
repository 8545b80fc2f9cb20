# The completion functions, after the table that cli/gendoc.c writes from
# cli/help.c (_crest_table, _crest_cmds, _crest_globals, _crest_global_args).

# The value name option $1 takes, or nothing.
_crest_argof() {
	local p
	for p in $_c_args $_crest_global_args; do
		[[ ${p%%:*} == "$1" ]] && { echo "${p#*:}"; return; }
	done
}

# Snapshots (12-digit id prefixes, and tags) and branches, from crest --json;
# nothing, quietly, without a store.
_crest_ids_tags() {
	local out
	out=$("$_c_crest" "${_c_store[@]}" --json ls 2>/dev/null) || return 0
	sed -n 's/.*"snapshot": "\([0-9a-f]\{12\}\).*/\1/p' <<<"$out"
	sed -n 's/.*"tags": \[\([^]]*\)\].*/\1/p' <<<"$out" | tr ',' '\n' | sed -n 's/^ *"\(.*\)" *$/\1/p'
}
# A snapshot name: ids, tags, latest and branches (cas/history.h).
_crest_snapshots() {
	_crest_ids_tags
	[[ -n $("$_c_crest" "${_c_store[@]}" --json ls 2>/dev/null | grep -m1 '"snapshot"') ]] || return 0
	echo latest
	_crest_branches
}
_crest_branches() {
	"$_c_crest" "${_c_store[@]}" --json branch 2>/dev/null | sed -n 's/.*"branch": "\([^"]*\)".*/\1/p'
}

# COMPREPLY: the words for a value or operand named $1 that start with $2.
_crest_values() {
	local cur=$2
	case $1 in
	SNAPSHOT) COMPREPLY=($(compgen -W "$(_crest_snapshots)" -- "$cur")) ;;
	BRANCH) COMPREPLY=($(compgen -W "$(_crest_branches)" -- "$cur")) ;;
	DIR) COMPREPLY=($(compgen -d -- "$cur")) ;;
	FILE | PATH) COMPREPLY=($(compgen -f -- "$cur")) ;;
	COMMAND) COMPREPLY=($(compgen -W "$(_crest_cmds "$_c_prog")" -- "$cur")) ;;
	PROGRAM) COMPREPLY=($(compgen -c -- "$cur")) ;;
	*'|'*) COMPREPLY=($(compgen -W "${1//|/ }" -- "$cur")) ;;
	*) COMPREPLY=() ;;
	esac
}

_crest_complete() {
	local _c_prog=$1 _c_crest _c_store=() cmd="" nops=0 ended=0 want="" i w a
	local _c_opts="" _c_args="" _c_operands="" _c_ends=0
	local cur=${COMP_WORDS[COMP_CWORD]}
	# casctl asks crest (beside it) for snapshot names.
	_c_crest=${COMP_WORDS[0]%casctl}
	[[ $_c_crest == "${COMP_WORDS[0]}" ]] || _c_crest+=crest
	COMPREPLY=()
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		want=""
		((ended)) && continue
		if [[ $w == -- ]]; then
			[[ -n $cmd ]] && ended=1
		elif [[ $w == -?* ]]; then
			a=$(_crest_argof "$w")
			[[ $w == --store ]] && _c_store=(--store "${COMP_WORDS[i + 1]}")
			if [[ -n $a ]]; then
				((i + 1 == COMP_CWORD)) && want=$a
				((i++))
			fi
		elif [[ -z $cmd ]]; then
			cmd=$w
			_crest_table "$_c_prog" "$cmd"
		else
			((nops++))
			((_c_ends)) && ended=1
		fi
	done
	if [[ -n $want ]]; then
		_crest_values "$want" "$cur"
	elif ((ended)); then
		COMPREPLY=($(compgen -f -- "$cur"))
	elif [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$_c_opts $_crest_globals" -- "$cur"))
	elif [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$(_crest_cmds "$_c_prog")" -- "$cur"))
	else
		local ops=($_c_operands) k
		((${#ops[@]})) || return 0
		if ((nops < ${#ops[@]})); then
			k=${ops[nops]}
		else
			k=${ops[${#ops[@]} - 1]}
			[[ $k == *... ]] || return 0
		fi
		_crest_values "${k%...}" "$cur"
	fi
	return 0
}
_crest_crest() { _crest_complete crest; }
_crest_casctl() { _crest_complete casctl; }
complete -F _crest_crest crest
complete -F _crest_casctl casctl
