# chunkers.gp - draws chunkers.sh's figures from NAME.dat: above, new bytes
# after the change (share of the changed data's logical bytes) against chunk
# size for fixed and content-defined chunks; below, first and second put MB/s.
# Left the memory image changed in place, right the file with insertions.
# gnuplot -e "dat='F.dat'; out='F.png'; mem='1G'; file='256M'" chunkers.gp
set terminal pngcairo size 1200,950 font 'sans,11'
set output out
stamp = system("sed -n '1s/^# //p' '".dat."'")
set multiplot layout 2,2 title "bench/store/chunkers.sh ".mem." ".file.": fixed against content-defined chunks, a fresh store per point\n{/*0.85 ".stamp."}\n"

# x: the chunk size (average for cdc), log 2 scale.
kib(s) = real(s[1:strlen(s) - 1])
only(kind, y) = strcol(2) eq kind ? y : NaN
set logscale x 2
set xrange [3.2:80]
set xtics ('4' 4, '8' 8, '16' 16, '64' 64)
set xlabel 'chunk size, KiB (cdc: average)'
set grid xtics ytics
set key top left box opaque
fixc = '#d62728'
cdcc = '#1f77b4'

set logscale y
set ylabel 'new bytes after the change, % of logical (log scale)'
set yrange [0.3:300]
set ytics (0.5, 1, 2, 5, 10, 20, 50, 100)
do for [b = 0:1] {
	set title (b == 0 ? "memory ".mem.", then 1% of its 4 KiB pages rewritten in place" \
	                  : "file ".file." of random bytes, then 100 runs of 1-64 bytes inserted")
	plot dat index b using (kib(strcol(3))):(only('fixed', $6)) with linespoints pt 7 ps 1.3 lw 2 lc rgb fixc title 'fixed', \
	     '' index b using (kib(strcol(3))):(only('cdc', $6)) with linespoints pt 5 ps 1.3 lw 2 lc rgb cdcc title 'cdc (content-defined)', \
	     '' index b using (kib(strcol(3))):(only('fixed', $6)):(sprintf('%.2f', $6)) with labels offset 0,-1 font 'sans,9' tc rgb fixc notitle, \
	     '' index b using (kib(strcol(3))):(only('cdc', $6)):(sprintf('%.2f', $6)) with labels offset 0,1 font 'sans,9' tc rgb cdcc notitle
}

unset logscale y
set ylabel 'put rate, MB/s (logical bytes over wall time)'
set yrange [0:*]
set offsets 0, 0, graph 0.25, 0
set ytics auto
set key top left maxrows 2 box opaque
do for [b = 0:1] {
	set title (b == 0 ? "memory ".mem.": first put (all new) and second put (after the change)" \
	                  : "file ".file.": first put (all new) and second put (after the change)")
	plot dat index b using (kib(strcol(3))):(only('fixed', $5)) with linespoints pt 7 ps 1.3 lw 2 lc rgb fixc title 'fixed, first put', \
	     '' index b using (kib(strcol(3))):(only('cdc', $5)) with linespoints pt 5 ps 1.3 lw 2 lc rgb cdcc title 'cdc, first put', \
	     '' index b using (kib(strcol(3))):(only('fixed', $7)) with linespoints pt 6 ps 1.3 lw 2 dt 2 lc rgb fixc title 'fixed, second put', \
	     '' index b using (kib(strcol(3))):(only('cdc', $7)) with linespoints pt 4 ps 1.3 lw 2 dt 2 lc rgb cdcc title 'cdc, second put'
}
unset multiplot
