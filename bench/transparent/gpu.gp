# gpu.gp - draws gpu.sh's figures from the table bench/gpu_plot.sh makes of
# its JSON: the bare driver + CRIU checkpoints (no crest) against crest
# demo's, phase by phase, with the stall target; the restores; and each crest
# checkpoint's bytes and background ingest.
#  index 0: label lock driver_checkpoint criu_dump driver_restore_unlock other stall
#  index 1: label images_from_store criu_restore driver_restore_unlock other total
#  index 2: checkpoint step logical_GB changed_max_GB new_GB stored_GB ingest_s
#  index 3: bare_mean_stall_s target_s crest_mean_stall_s identical lines_compared
# gnuplot -e "dat='F.dat'; out='F.png'" gpu.gp
set terminal pngcairo size 1400,1100 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."' | sed 's/_/\\\\_/g'")  # _ is not a subscript
job = system("sed -n '2s/.*; job: //p' '".dat."'")
stats dat index 3 using 1 nooutput
bare = STATS_min
stats dat index 3 using 2 nooutput
target = STATS_min
stats dat index 2 using 1 nooutput
nck = STATS_max
stats dat index 2 using 7 nooutput
ing = STATS_max
stats dat index 3 using 3 nooutput
crest = STATS_min
same = system("awk '/^# bare_mean/ { getline; print $4 \" (\" $5 \" lines compared)\" }' '".dat."'")
set multiplot title sprintf("bench/transparent/gpu.sh: a CUDA job (%s), checkpointed bare and by crest demo\nrestored job's output equal to an uninterrupted run's: %s\n{/*0.85 %s}\n", job, same, stamp)

set style data histogram
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set grid ytics
set key below maxrows 2 font 'sans,10'
set yrange [0:*]
set offsets 0, 0, graph 0.15, 0
set xtics nomirror scale 0 font 'sans,10'
c_lock = '#000000'
c_ckpt = '#7f7f7f'
c_criu = '#ff7f0e'
c_rest = '#1f77b4'
c_other = '#d62728'

set size 1, 0.47
set origin 0, 0.45
set key outside right top vertical maxcols 1 maxrows 10 Left reverse box font 'sans,10'
set rmargin 45
set title sprintf('stall: the job frozen, phase by phase; crest mean %.2f s = %.2f x the bare mean %.2f s (target: 1.15 x = %.2f s)', crest, crest / bare, bare, target)
set ylabel 'seconds'
plot dat index 0 using 2:xtic(1) lc rgb c_lock title 'driver lock', \
     '' index 0 using 3 lc rgb c_ckpt title 'driver checkpoint (device memory to host)', \
     '' index 0 using 4 lc rgb c_criu title 'criu dump', \
     '' index 0 using 5 lc rgb c_rest title 'driver restore + unlock', \
     '' index 0 using 6 lc rgb c_other title 'other (crest: hooks, scans; bare: none timed)', \
     '' index 0 using 0:7:(sprintf('%.2f s', $7)) with labels offset 0,0.8 notitle, \
     target with lines dt 2 lw 2 lc rgb 'black' title 'target: 1.15 x the bare mean stall'

set size 0.5, 0.45
set origin 0, 0
set rmargin 3
set key inside top left vertical maxcols 2 noreverse Right box opaque
set offsets 0, 0, graph 0.55, 0
set title 'restore: bare (in place) against crest (into a new process)'
plot dat index 1 using 2:xtic(1) lc rgb '#2ca02c' title 'images out of the store, verified', \
     '' index 1 using 3 lc rgb c_criu title 'criu restore', \
     '' index 1 using 4 lc rgb c_rest title 'driver restore + unlock', \
     '' index 1 using 5 lc rgb c_other title 'other', \
     '' index 1 using 0:6:(sprintf('%.2f s', $6)) with labels offset 0,0.8 notitle

set origin 0.5, 0
set title "crest's checkpoints: bytes, and the background ingest"
set style data linespoints
set style fill solid 0.85 border -1
set xrange [0.5:nck + 0.5]
set offsets 0, 0, graph 0.1, 0
set xtics 1 format 'checkpoint %g' scale 0
set ylabel 'GB (10^9 bytes)'
set y2label 'ingest, seconds'
set y2range [0:ing * 1.3]
set y2tics
set ytics nomirror
set key below maxrows 3
set rmargin 9
set boxwidth 0.2
plot dat index 2 using ($1 - 0.3):3:(0.2) with boxes lc rgb '#c7c7c7' title 'logical', \
     '' index 2 using ($1 - 0.1):4:(0.2) with boxes lc rgb '#fdd0a2' title 'at most changed since the last', \
     '' index 2 using ($1 + 0.1):5:(0.2) with boxes lc rgb c_other title 'new to the store', \
     '' index 2 using ($1 + 0.3):6:(0.2) with boxes lc rgb '#9467bd' title 'stored (after LZ4)', \
     '' index 2 using 1:7 axes x1y2 with linespoints pt 7 ps 1.5 lw 2 lc rgb 'black' title 'ingest, s (right axis)', \
     '' index 2 using 1:7:(sprintf('%.1f s', $7)) axes x1y2 with labels offset 0,1 notitle
unset multiplot
