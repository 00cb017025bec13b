%% Erlang's side of graft's `serialise` bench: term_to_binary and
%% binary_to_term on the same workloads (issue 3), one JSON line per figure,
%% so that a ratio is measured in one session. Run with `run.sh` here.
%% Erlang terms cannot form cycles, so there is no cyclic figure. Erlang
%% does not keep sharing: the DAG is written as a tree (about 12.6 M
%% nodes); its rate still counts the 1 M distinct nodes, as graft's does.
-module(serialise).
-export([main/0]).

-define(RUNS, 7).
-define(NODES, 1000000).

main() ->
    flat(), words(), dag(), ok.

emit(Metric, Unit, Value) ->
    io:format("{\"system\":\"erlang\",\"bench\":\"serialise\",\"metric\":\"~s\",\"unit\":\"~s\",\"value\":~.3f}~n",
              [Metric, Unit, float(Value)]).

%% Median time of F over the runs, in seconds.
time(F) ->
    Ts = lists:sort([begin
                         erlang:garbage_collect(),
                         T0 = erlang:monotonic_time(nanosecond),
                         _ = F(),
                         erlang:monotonic_time(nanosecond) - T0
                     end || _ <- lists:seq(1, ?RUNS)]),
    lists:nth(?RUNS div 2 + 1, Ts) / 1.0e9.

%% xorshift64*, as graft's bench.
rng(S0) ->
    M = 16#FFFFFFFFFFFFFFFF,
    S1 = S0 bxor (S0 bsr 12),
    S2 = S1 bxor ((S1 bsl 25) band M),
    S3 = S2 bxor (S2 bsr 27),
    {(S3 * 16#2545F4914F6CDD1D) band M, S3}.

randoms(0, _S, Acc) -> lists:reverse(Acc);
randoms(N, S, Acc) -> {X, S1} = rng(S), randoms(N - 1, S1, [X | Acc]).

throughput(Name, V) ->
    B = term_to_binary(V),
    V = binary_to_term(B),
    Mb = byte_size(B) / 1.0e6,
    emit(Name ++ "_encode_mb_s", "MB/s", Mb / time(fun() -> term_to_binary(V) end)),
    emit(Name ++ "_decode_mb_s", "MB/s", Mb / time(fun() -> binary_to_term(B) end)).

flat() -> throughput("flat", randoms(?NODES, 16#12345678, [])).

words() ->
    {Ws, _} = lists:mapfoldl(
                fun(_, S) ->
                        {X, S1} = rng(S),
                        N = 5 + X rem 8,
                        {Cs, S2} = lists:mapfoldl(fun(_, Si) -> {Y, Sj} = rng(Si), {$a + Y rem 26, Sj} end,
                                                  S1, lists:seq(1, N)),
                        {list_to_binary(Cs), S2}
                end, 16#9e3779b9, lists:seq(1, 100000)),
    throughput("words", Ws).

%% Node i >= 1 has children [node(i div 100), node(i div 1000)].
build_dag() ->
    T = build(0, ?NODES, array:new(?NODES)),
    [array:get(I, T) || I <- lists:seq(0, ?NODES - 1)].

build(N, N, T) -> T;
build(0, N, T) -> build(1, N, array:set(0, {0, []}, T));
build(I, N, T) ->
    Node = {I, [array:get(I div 100, T), array:get(I div 1000, T)]},
    build(I + 1, N, array:set(I, Node, T)).

dag() ->
    Nodes = build_dag(),
    B = term_to_binary(Nodes),
    Enc = time(fun() -> term_to_binary(Nodes) end),
    Dec = time(fun() -> binary_to_term(B) end),
    emit("dag_encode_mnodes_s", "Mnodes/s", ?NODES / 1.0e6 / Enc),
    emit("dag_decode_mnodes_s", "Mnodes/s", ?NODES / 1.0e6 / Dec),
    emit("dag_bytes_per_node", "bytes", byte_size(B) / ?NODES).
