from bench.accuracy.study import main

main()
