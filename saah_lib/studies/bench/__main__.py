from saah_lib.studies.bench import main

main()
