# model_soak.gp - draws model_soak.sh's runs from NAME.dat: operations per
# second of each run of the randomized model test (its own seed and store),
# failed runs marked with their seed; below, each run's operations and wall
# time, so a short last run (cut by the time limit) reads as such.
# gnuplot -e "dat='F.dat'; out='F.png'; minutes='2'; ops='20000'" model_soak.gp
set terminal pngcairo size 1200,800 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."'")
stats dat using 1 nooutput
nruns = STATS_records
nfail = int(system("awk '$5 == \"FAIL\"' '".dat."' | wc -l"))
set multiplot layout 2,1 title sprintf("bench/store/model\\_soak.sh %s %s: tests/store/model runs for %s min, %d runs, %d failed\n{/*0.85 %s}\n", minutes, ops, minutes, nruns, nfail, stamp)

ok(y) = strcol(5) eq 'ok' ? y : NaN
bad(y) = strcol(5) eq 'FAIL' ? y : NaN
set xrange [0.5:nruns + 0.5]
set xtics 1
if (nruns > 30) { set xtics autofreq }
set grid ytics
set key top right box opaque

set title sprintf('operations per second, each run with a fresh random seed and store (at most %s operations a run)', ops)
set xlabel 'run'
set ylabel 'operations / s'
set yrange [0:*]
set offsets 0, 0, graph 0.25, 0
stats dat using 4 nooutput
plot dat using 1:(ok($4)) with linespoints pt 7 ps 1.2 lw 1.5 lc rgb '#1f77b4' title 'run passed', \
     dat using 1:(bad($4)) with points pt 2 ps 3 lw 3 lc rgb '#d62728' title 'run FAILED (seed below it; replay: CREST\_TEST\_SEED=seed)', \
     dat using 1:(bad($4)):(sprintf('seed %s', strcol(6))) with labels offset 0,-1.5 font 'sans,9' tc rgb '#d62728' notitle, \
     STATS_mean with lines dt 2 lc rgb 'gray40' title sprintf('mean of all runs, %.0f/s', STATS_mean)

set title 'operations done (bars) and wall time (points) per run; a FAILED run counts those before the failing one'
set ylabel 'operations'
set y2label 'seconds'
set y2range [0:*]
set y2tics
set ytics nomirror
set offsets 0, 0, graph 0.3, 0
set style fill solid 0.6 border -1
set boxwidth 0.6
plot dat using 1:(ok($3)) with boxes lc rgb '#1f77b4' title 'operations, run passed', \
     dat using 1:(bad($3)) with boxes lc rgb '#d62728' title 'operations, run FAILED', \
     dat using 1:2 axes x1y2 with points pt 9 ps 1.5 lc rgb 'black' title 'wall time, s (right axis)'
unset multiplot
