# ingest.gp - draws ingest.sh's figures from NAME.dat: above, MB/s of each
# tool and of crest put/get on the same bytes (a put's target as a black
# mark); below, new and stored MiB of each version of the dedup series.
# gnuplot -e "dat='F.dat'; out='F.png'; size='4G'; series='1G'" ingest.gp
set terminal pngcairo size 1200,1000 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."'")
set multiplot layout 2,1 title "bench/store/ingest.sh ".size." ".series."\n{/*0.85 ".stamp."}\n"

# Above: one horizontal bar per row, the first at the top.
set title "Ingest and restore of ".size." of memory-like data (store\\_tool memory), input in the page cache; MB/s = 10^6 bytes/s"
set style fill solid 0.85 border -1
set xlabel 'MB/s (logical bytes over wall time)'
set xrange [0:*]
set yrange [*:*] reverse
set offsets 0, graph 0.08, 0.6, 2.6  # (y reversed: "bottom" is above the first bar) room for the key
set ytics nomirror
set grid xtics
set key top left horizontal maxcols 2 box opaque
set lmargin 30
color(k) = k eq 'tool' ? 0x9e9e9e : k eq 'put' ? 0xd62728 : 0x1f77b4
plot dat index 0 using ($2 / 2):0:($2 / 2):(0.35):(color(strcol(3))):ytic(1) with boxxyerror lc rgb variable notitle, \
     '' index 0 using 2:0:(sprintf(' %d', $2)) with labels left font 'sans,10' notitle, \
     '' index 0 using ($5 > 0 ? $5 : NaN):($0 - 0.45):(0):(0.9) with vectors nohead lw 3 lc rgb 'black' \
        title 'target of a put: 0.8 x min(workers x openssl SHA-256, disk write)', \
     NaN with boxes lc rgb '#9e9e9e' title 'other tools, same bytes', \
     NaN with boxes lc rgb '#d62728' title 'crest put', \
     NaN with boxes lc rgb '#1f77b4' title 'crest get'

# Below: the dedup series, log scale: version 1 stores everything.
set title "Dedup series: 10 versions of a ".series." state, 2% of its 4 KiB pages changed between versions"
set xlabel 'version'
set ylabel 'MiB (log scale)'
set xrange [0.5:10.5]
set xtics 1
stats dat index 1 using 3 nooutput
set yrange [*:STATS_max / 1048576.0 * 15] noreverse  # room for the key above
set offsets 0, 0, 0, 0
set logscale y
set grid xtics ytics
set key top right horizontal maxrows 2 box opaque
set lmargin 30
mib(c, want, col) = strcol(2) eq want ? column(col) / 1048576.0 : NaN
plot dat index 1 using 1:(mib(0, 'fixed4k', 3)) with lines dt 2 lc rgb 'gray30' title 'logical (each version)', \
     '' index 1 using 1:(mib(0, 'fixed4k', 4)) with linespoints pt 7 lc rgb '#d62728' title 'new, fixed 4 KiB chunks', \
     '' index 1 using 1:(mib(0, 'fixed4k', 5)) with linespoints pt 5 dt 3 lc rgb '#d62728' title 'stored, fixed 4 KiB chunks', \
     '' index 1 using 1:(mib(0, 'default', 4)) with linespoints pt 7 lc rgb '#1f77b4' title 'new, default chunking', \
     '' index 1 using 1:(mib(0, 'default', 5)) with linespoints pt 5 dt 3 lc rgb '#1f77b4' title 'stored, default chunking'
unset multiplot
