from saah_lib.studies.bench import main

if __name__ == "__main__":
    main()
