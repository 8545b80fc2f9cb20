# gc.gp - draws gc.sh's figures from NAME.dat: gc wall time, gc peak RSS and
# the ingest of all versions for each crest store and restic, and the peak
# RSS of casctl gc --dry-run against the extents the kept snapshots name.
# gnuplot -e "dat='F.dat'; out='F.png'; keep='50'; versions='101'" gc.gp
set terminal pngcairo size 1200,900 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."'")
set multiplot layout 2,2 title "bench/store/gc.sh: gc of ".versions." snapshots, the newest ".keep." kept, crest against restic forget --prune\n{/*0.85 ".stamp."}\n"

set style fill solid 0.85 border -1
set boxwidth 0.6
set xrange [-0.6:3.6]
set yrange [0:*]
set offsets 0, 0, graph 0.12, 0
set grid ytics
set xtics nomirror scale 0 font 'sans,10'
color(name) = name eq 'restic prune' ? 0x9e9e9e : 0xd62728
set title 'gc wall time, caches dropped before each'
set ylabel 'seconds'
plot dat index 0 using 0:2:(color(strcol(1))):xtic(1) with boxes lc rgb variable notitle, \
     '' index 0 using 0:2:(sprintf('%.2f', $2)) with labels offset 0,0.8 notitle

set title 'gc peak RSS (/usr/bin/time -v)'
set ylabel 'MiB'
plot dat index 0 using 0:($3 / 1024):(color(strcol(1))):xtic(1) with boxes lc rgb variable notitle, \
     '' index 0 using 0:($3 / 1024):(sprintf('%.0f', $3 / 1024)) with labels offset 0,0.8 notitle

set title 'ingest of all '.versions.' versions (sum of wall times)'
set ylabel 'seconds'
plot dat index 0 using 0:6:(color(strcol(1))):xtic(1) with boxes lc rgb variable notitle, \
     '' index 0 using 0:6:(sprintf('%.1f', $6)) with labels offset 0,0.8 notitle

set title 'casctl gc --dry-run on the fixed 4 KiB store: peak RSS'
set xlabel 'chunks in the index, millions'
set ylabel 'MiB'
set xrange [0:*]
set offsets graph 0.05, graph 0.05, graph 0.2, 0
set xtics scale 1 font 'sans,11'
set grid xtics ytics
set key top left box opaque
k = keep + 0
v = versions + 0
growing(x) = column(3) == (column(1) < k ? column(1) : k) ? x : NaN
at_end(x) = column(1) == v ? x : NaN
plot dat index 1 using (growing($2 / 1e6)):6 with linespoints pt 7 ps 1.2 lc rgb '#d62728' \
        title 'as versions are stored, '.keep.' kept (fewer: all)', \
     '' index 1 using (at_end($2 / 1e6)):6 with points pt 6 ps 2 lw 2 lc rgb 'black' title 'all '.versions.' stored, kept as labelled', \
     '' index 1 using (at_end($2 / 1e6)):6:(sprintf('%d kept ', $3)) with labels right offset -1.5,0 font 'sans,9' notitle
unset multiplot
