# gpu_bench.gp - draws gpu_bench.sh's figures per round, from the table
# bench/gpu_plot.sh makes of OUTDIR/library.dat (a line per round):
#  1 round  2 stall_s  3 stall_GBps  4 stall2_s  5 stall2_GBps  6 ingest_s
#  7 ingest2_s  8 restore1_s  9 restore1_GBps  10 restore2_s  11 restore2_GBps
#  12 driver_checkpoint_s  13 driver_restore_s  14 pcie_dtoh_4streams_GBps
#  15 gib  16/17 ceiling pinned+h2d GB/s, threads  18/19 pinned  20/21
#  read+crc+copy  22/23 read  24 bitexact (both restores)
# A figure a round did not record is NaN and is left out of the picture.
# gnuplot -e "dat='F.dat'; out='F.png'" gpu_bench.gp
set terminal pngcairo size 1400,1150 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."' | sed 's/_/\\\\_/g'")  # _ is not a subscript
stats dat using 1 nooutput
nr = STATS_records
stats dat using 15 nooutput
gib = STATS_max
stats dat using 17 nooutput
thr = STATS_max
nbad = int(system("awk '!/^#/ && $24 != \"yes\"' '".dat."' | wc -l"))
set multiplot layout 2,2 title sprintf("bench/library/gpu\\_bench.sh: libcrest on %g GiB of device memory, %d round%s; restores bit-exact: %s\n{/*0.85 %s}\n", \
	gib, nr, nr > 1 ? "s" : "", nbad ? sprintf("NO in %d round(s)", nbad) : "yes, every round", stamp)

set xrange [0.5:nr + 0.5]
set xtics 1 format 'round %g' scale 0
set style fill solid 0.85 border -1
set grid ytics
set key below maxcols 2 font 'sans,10'
lab(c, fmt) = strcol(c) eq 'NaN' ? ' ' : sprintf(fmt, column(c))  # no label for a figure not taken
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0
crestc = '#d62728'
crest2 = '#f4a3a3'
seg(x) = x - 0.45  # a round's figure drawn as a segment across its bars

set title 'checkpoint stall (time in crest\_checkpoint; labels: seconds)'
set ylabel 'GB/s (10^9 bytes/s)'
plot dat using ($1 - 0.2):3:(0.36) with boxes lc rgb crestc title 'first checkpoint (all new)', \
     '' using ($1 + 0.2):5:(0.36) with boxes lc rgb crest2 title 'second checkpoint (nothing changed)', \
     '' using ($1 - 0.2):3:(lab(2, '%.3f s')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using ($1 + 0.2):5:(lab(4, '%.3f s')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using (seg($1)):14:(0.9):(0) with vectors nohead lw 3 lc rgb 'black' title 'PCIe device-to-host, pinned, 4 streams (same run)', \
     45 with lines dt 2 lw 2 lc rgb 'gray40' title 'target: 45 GB/s'

set title sprintf('restore into the GPU, page cache warm, against restore\_ceiling (%g threads)', thr)
plot dat using ($1 - 0.2):9:(0.36) with boxes lc rgb '#1f77b4' title 'crest\_restore, first', \
     '' using ($1 + 0.2):11:(0.36) with boxes lc rgb '#9ecae1' title 'crest\_restore, second', \
     '' using ($1 - 0.2):9:(lab(8, '%.3f s')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using ($1 + 0.2):11:(lab(10, '%.3f s')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using (seg($1)):18:(0.9):(0) with vectors nohead lw 2 dt 3 lc rgb '#ff7f0e' title 'ceiling: pread into pinned memory', \
     '' using (seg($1)):16:(0.9):(0) with vectors nohead lw 3 lc rgb 'black' title 'ceiling: that + host-to-device copy', \
     '' using (seg($1)):20:(0.9):(0) with vectors nohead lw 2 dt 2 lc rgb '#2ca02c' title 'ceiling: pread + copy + CRC32C', \
     20 with lines dt 2 lw 2 lc rgb 'gray40' title 'target: 20 GB/s'

set title 'background ingest of each checkpoint (the job runs meanwhile)'
set ylabel 'seconds'
set offsets 0, 0, graph 0.15, 0
plot dat using ($1 - 0.2):6:(0.36) with boxes lc rgb crestc title sprintf('first: %g GiB, all new', gib), \
     '' using ($1 + 0.2):7:(0.36) with boxes lc rgb crest2 title 'second: nothing new', \
     '' using ($1 - 0.2):6:(sprintf('%.2f s\n%.2f GB/s', $6, $15 * 1.073741824 / $6)) with labels offset 0,1.3 font 'sans,9' notitle, \
     '' using ($1 + 0.2):7:(lab(7, '%.2f s')) with labels offset 0,0.7 font 'sans,9' notitle

set title sprintf("crest against the driver's own checkpoint and restore, %g GiB", gib)
set ylabel 'seconds (log scale)'
set logscale y
set yrange [0.05:*]
set offsets 0, 0, 0, 0
plot dat using ($1 - 0.3):2:(0.18) with boxes lc rgb crestc title 'crest stall', \
     '' using ($1 - 0.1):12:(0.18) with boxes lc rgb '#7f7f7f' title 'driver cuCheckpointProcessCheckpoint', \
     '' using ($1 + 0.1):8:(0.18) with boxes lc rgb '#1f77b4' title 'crest restore (first)', \
     '' using ($1 + 0.3):13:(0.18) with boxes lc rgb '#c7c7c7' title 'driver cuCheckpointProcessRestore', \
     '' using ($1 - 0.3):2:(lab(2, '%.2f')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using ($1 - 0.1):12:(lab(12, '%.2f')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using ($1 + 0.1):8:(lab(8, '%.2f')) with labels offset 0,0.7 font 'sans,9' notitle, \
     '' using ($1 + 0.3):13:(lab(13, '%.2f')) with labels offset 0,0.7 font 'sans,9' notitle
unset multiplot
